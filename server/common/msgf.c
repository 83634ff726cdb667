/* msgf: a formatted message into an optional buffer (see msgf.h). */
#include "common/msgf.h"

#include <stdarg.h>
#include <stdio.h>

void kv_msgf(char *msg, size_t len, const char *fmt, ...)
{
    if (msg == NULL || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
}
