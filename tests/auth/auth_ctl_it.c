/* auth_ctl_it: acu_etcdctl (auth_ctl_util.h) on the integration harness's process runner. */
#include "auth_ctl_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define MAXARGS 24

int acu_etcdctl(const char *bin, const char *endpoint, const char *stdin_data, const char *cmd,
                char *out, size_t cap)
{
    char ep[160], buf[1024];
    snprintf(ep, sizeof ep, "--endpoints=%s", endpoint);
    const char *argv[MAXARGS] = {bin, ep};
    acu_argv(cmd, buf, sizeof buf, argv, 2, MAXARGS);
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    kv_it_cmd_result r;
    cr_assert_eq(kv_it_run(argv, env, stdin_data, stdin_data ? strlen(stdin_data) : 0, 30000, &r),
                 0, "cannot run %s", bin);
    acu_output(r.out, r.err, out, cap);
    int code = r.timed_out ? 999 : r.exit_code;
    kv_it_cmd_result_free(&r);
    return code;
}
