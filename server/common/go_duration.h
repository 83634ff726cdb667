/*
 * go_duration: Go's time.ParseDuration, which etcd 3.4 uses for every duration it takes from a
 * user (its duration flags, the JWT ttl= option of --auth-token, the periodic
 * --auto-compaction-retention), so that kvd reads a duration an etcd user wrote as etcd does.
 * Pure function, any thread.
 */
#ifndef KV_COMMON_GO_DURATION_H
#define KV_COMMON_GO_DURATION_H

#include <stdint.h>

#define KV_NS_PER_MS 1000000LL   /* nanoseconds in a millisecond */
#define KV_NS_PER_S 1000000000LL /* nanoseconds in a second */

/* Reads s as Go's time.ParseDuration does, into *ns (nanoseconds): an optional sign, then one
 * or more decimal numbers, each with an optional fraction and a unit: ns, us, µs (U+00B5), μs
 * (U+03BC), ms, s, m or h ("1m30s", "1h0m0s", "1.5h", ".5s", "500ms", "2us", "-1s", "+5m").
 * "0" (signed or not) needs no unit. Refused as Go refuses them: "" and a lone sign, a number
 * with no digits (".s"), a missing unit inside ("1m30"), an unknown or upper-case unit ("5S",
 * "1e3s": no exponent), spaces anywhere, and a value past int64 nanoseconds (about 292 years:
 * "9223372036854775808ns", "2562048h"). Digits of a fraction past int64's precision are
 * dropped, and a fraction adds its nanoseconds through a double, as Go does (exact for
 * fractions of hours).
 *
 * bare_unit_ns: 0 for Go's own rule, where a lone number without a unit other than "0"
 * ("1500", "1.5") is refused (Go's "missing unit"). Otherwise the nanoseconds one unit of such
 * a lone number is worth, for the kvd flags that took a plain number before: KV_NS_PER_MS makes
 * "1500" 1.5 s (kvd's server flags), KV_NS_PER_S makes "1.5" 1.5 s. Only a number alone is
 * read so; a unitless number inside ("1m30") stays refused. A negative bare_unit_ns: -EINVAL.
 *
 * Differences from Go 1.19, both as in Go before its parser used unsigned integers: a value of
 * exactly -2^63 ns ("-9223372036854775808ns", Go's minimum) is refused, and a fraction whose
 * digits, leading zeros aside, begin with 9223372036854775808 keeps one digit less.
 * Returns 0, or -EINVAL (*ns unchanged). */
int kv_go_duration_parse(const char *s, int64_t bare_unit_ns, int64_t *ns);

#endif
