/* kvt_kvc.c - libkvclient clients for tests (see kvt_kvc.h). */
#include "kvt_kvc.h"

#include <criterion/criterion.h>

kvc_client *kvt_kvc_open(const char *endpoint)
{
    const char *eps[] = {endpoint};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    kvc_client *c = NULL;
    kvc_error e;
    cr_assert_eq(kvc_open(&c, &cfg, &e), 0, "kvc_open %s: %s", endpoint, e.message);
    return c;
}
