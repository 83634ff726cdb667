/*
 * kvt_skip: skipping a test because something it needs is not installed.
 *
 * Run by hand, a missing tool (a reference etcd, etcdctl, go, curl, python3, dpkg-deb, a
 * tmpfs mount) skips the test with its reason, as cr_skip_test does. In CI everything is
 * installed (.ci/run installs it and exports KVT_NO_SKIP=1): there the same condition FAILS
 * the test, so a skip can never hide a test that did not run (a Criterion skip exits 0 and
 * ctest would call it Passed). .ci/run also prints every "[SKIP]" line of the run.
 *
 * Skips that depend on the server under test (a kvd-only check while the suite runs against
 * etcd, KV_TEST_SERVER=etcd) keep cr_skip_test: CI's kvd run never takes them.
 *
 * Header-only; include after <criterion/criterion.h>.
 */
#ifndef KVT_SKIP_H
#define KVT_SKIP_H

#include <stdlib.h>

#include <criterion/criterion.h>

/* 1 when skips for missing tools are failures (KVT_NO_SKIP set and not "0"). */
static inline int kvt_no_skip(void)
{
    const char *v = getenv("KVT_NO_SKIP");
    return v && *v && !(v[0] == '0' && v[1] == 0);
}

/* Skips (by hand) or fails (KVT_NO_SKIP) the running test; arguments as printf. */
#define KVT_SKIP_MISSING(...)                                                                      \
    do {                                                                                           \
        if (kvt_no_skip()) {                                                                       \
            cr_log_error("KVT_NO_SKIP is set: a missing dependency fails the test instead of "     \
                         "skipping it");                                                           \
            cr_assert_fail(__VA_ARGS__);                                                           \
        }                                                                                          \
        cr_skip_test(__VA_ARGS__);                                                                 \
    } while (0)

#endif
