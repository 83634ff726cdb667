/* kv_go_duration_parse (server/common/go_duration.h): Go's time.ParseDuration. The expected
 * nanoseconds and refusals are Go 1.19's own answers (time.ParseDuration on each string). */
#include "common/go_duration.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>

typedef struct {
    const char *s;
    int64_t ns;
} valid_case;

/* Valid in Go, read the same in both modes (a unit everywhere, or "0"). */
static const valid_case valid[] = {
    {"0", 0},
    {"-0", 0},
    {"+0", 0},
    {"0s", 0},
    {"-0s", 0},
    {"01s", 1000000000},
    {"1ns", 1},
    {"1us", 1000},
    {"1\xc2\xb5s", 1000}, /* U+00B5 MICRO SIGN */
    {"1\xce\xbcs", 1000}, /* U+03BC GREEK SMALL LETTER MU */
    {"1ms", 1000000},
    {"1s", 1000000000},
    {"1m", 60000000000},
    {"1h", 3600000000000},
    {"1m30s", 90000000000},
    {"1h0m0s", 3600000000000},
    {"1h30m", 5400000000000},
    {"90m", 5400000000000},
    {"1.5h", 5400000000000},
    {".5s", 500000000},
    {"5.s", 5000000000},
    {"500ms", 500000000},
    {"2us", 2000},
    {"-1s", -1000000000},
    {"+5m", 300000000000},
    {"-1.5h", -5400000000000},
    {"1h1m1s1ms1us1ns", 3661001001001},
    {"0.000000001s", 1},
    {"1.0000000001s", 1000000000},                 /* below a nanosecond: dropped */
    {"1.00000000000000000000000001s", 1000000000}, /* past int64's digits: dropped */
    {"0.3333333333333333333h", 1200000000000},
    {"1.1h", 3960000000000},
    {"2.3m", 138000000000},
    {"2562047h47m16.854775807s", INT64_MAX},
    {"9223372036854775807ns", INT64_MAX},
    {"-9223372036854775807ns", -INT64_MAX},
};

/* Refused in both modes. */
static const char *const invalid[] = {
    "",
    "+",
    "-",
    "s",
    ".s",
    "-.s",
    ".",
    "1e3s",
    "1m30",
    "5S",
    "1 s",
    " 1s",
    "1s ",
    "1.5.s",
    "1hh",
    "1d",
    "1sec",
    "inf",
    "nan",
    "0x10s",
    "1,5s",
    "--1s",
    "+-1s",
    "1h-1m",
    "9223372036854775808ns",
    "2562048h",
    "2562047h47m16.854775808s",
    "-9223372036854775808ns", /* Go 1.19 takes it (its minimum): see go_duration.h */
};

Test(go_duration, go_forms_read_as_go_reads_them)
{
    static const int64_t modes[] = {0, KV_NS_PER_MS, KV_NS_PER_S};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
            int64_t ns = -42;
            cr_assert_eq(kv_go_duration_parse(valid[i].s, modes[m], &ns), 0,
                         "'%s' (bare unit %lld) refused", valid[i].s, (long long)modes[m]);
            cr_assert_eq(ns, valid[i].ns, "'%s' (bare unit %lld): %lld ns, want %lld", valid[i].s,
                         (long long)modes[m], (long long)ns, (long long)valid[i].ns);
        }
        for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
            int64_t ns = -42;
            cr_assert_eq(kv_go_duration_parse(invalid[i], modes[m], &ns), -EINVAL,
                         "'%s' (bare unit %lld) taken as %lld ns", invalid[i], (long long)modes[m],
                         (long long)ns);
            cr_assert_eq(ns, -42, "'%s': *ns written on a refusal", invalid[i]);
        }
    }
}

/* A lone number without a unit: refused by Go ("missing unit"), worth bare_unit_ns each
 * otherwise (kvd's server flags: milliseconds; its grpc-proxy's: seconds). */
Test(go_duration, a_lone_number_is_refused_by_go_and_in_the_bare_unit_otherwise)
{
    static const struct {
        const char *s;
        int64_t ms_ns, s_ns; /* with KV_NS_PER_MS, with KV_NS_PER_S */
    } bare[] = {
        {"1500", 1500000000, 1500000000000},
        {"1.5", 1500000, 1500000000},
        {"1", 1000000, 1000000000},
        {".5", 500000, 500000000},
        {"-1500", -1500000000, -1500000000000},
        {"+2", 2000000, 2000000000},
        {"00", 0, 0},
        {"0.0", 0, 0},
        {"9223372036854", 9223372036854000000, -1}, /* -1: past int64 ns, refused */
        {"9223372036855", -1, -1},
    };
    for (size_t i = 0; i < sizeof bare / sizeof bare[0]; i++) {
        int64_t ns = -42;
        cr_assert_eq(kv_go_duration_parse(bare[i].s, 0, &ns), -EINVAL,
                     "Go's rule took the lone number '%s' as %lld ns", bare[i].s, (long long)ns);
        int rc = kv_go_duration_parse(bare[i].s, KV_NS_PER_MS, &ns);
        if (bare[i].ms_ns == -1)
            cr_assert_eq(rc, -EINVAL, "'%s' in ms taken as %lld ns", bare[i].s, (long long)ns);
        else
            cr_assert(rc == 0 && ns == bare[i].ms_ns, "'%s' in ms: rc %d, %lld ns, want %lld",
                      bare[i].s, rc, (long long)ns, (long long)bare[i].ms_ns);
        rc = kv_go_duration_parse(bare[i].s, KV_NS_PER_S, &ns);
        if (bare[i].s_ns == -1)
            cr_assert_eq(rc, -EINVAL, "'%s' in s taken as %lld ns", bare[i].s, (long long)ns);
        else
            cr_assert(rc == 0 && ns == bare[i].s_ns, "'%s' in s: rc %d, %lld ns, want %lld",
                      bare[i].s, rc, (long long)ns, (long long)bare[i].s_ns);
    }
    /* only a number alone: one without a unit after another stays refused */
    int64_t ns = 0;
    cr_assert_eq(kv_go_duration_parse("1m30", KV_NS_PER_MS, &ns), -EINVAL);
    cr_assert_eq(kv_go_duration_parse("30.5s1", KV_NS_PER_S, &ns), -EINVAL);
    cr_assert_eq(kv_go_duration_parse("1500", -1, &ns), -EINVAL, "a negative bare unit");
}
