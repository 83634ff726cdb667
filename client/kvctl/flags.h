/*
 * kvctl flags: a small pflag/cobra-compatible command-line parser.
 *
 * Contract: flags may be interspersed with positional arguments; "--name=value", "--name value",
 * "-x value", "-xvalue", "-x=value" and bare boolean flags ("--prefix", "--prefix=false") are
 * accepted; "--" ends flag parsing. Parse errors are reported as etcdctl/cobra words them
 * ("unknown flag: --foo", "flag needs an argument: --limit", ...).
 */
#ifndef KVCTL_FLAGS_H
#define KVCTL_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVCTL_SLICE_MAX 4096

enum kvctl_flag_type {
    KVCTL_FLAG_BOOL,     /* dst: bool * */
    KVCTL_FLAG_STRING,   /* dst: const char ** (points into argv or the environment) */
    KVCTL_FLAG_INT64,    /* dst: int64_t * */
    KVCTL_FLAG_DURATION, /* dst: uint32_t * (milliseconds) */
    KVCTL_FLAG_SLICE,    /* dst: char[KVCTL_SLICE_MAX]: comma list; repeated flags append */
};

struct kvctl_flag {
    const char *name;
    char shorthand; /* 0 if none */
    enum kvctl_flag_type type;
    void *dst;
    bool changed; /* set by the parser when the flag was given */
};

/*
 * Parses argv[0..argc) against `sets` (n_sets arrays of flags, each terminated by an entry with
 * name == NULL). Positional arguments are stored (pointers into argv) in pos[0..*n_pos); pos
 * must have room for argc entries. On error writes a message into errbuf and returns -EINVAL.
 */
int kvctl_flags_parse(int argc, char **argv, struct kvctl_flag *const *sets, size_t n_sets,
                      char **pos, size_t *n_pos, char *errbuf, size_t errlen);

/* Applies ETCDCTL_<NAME> environment variables to flags of `set` that were not given on the
 * command line (etcdctl's flags.SetPflagsFromEnv). Values that do not parse are ignored, as
 * etcdctl ignores them. Returns 0 (errbuf is scratch space). */
int kvctl_flags_from_env(struct kvctl_flag *set, char *errbuf, size_t errlen);

/* Go's time.ParseDuration, truncated to milliseconds. Returns 0 or -EINVAL. */
int kvctl_parse_duration(const char *s, uint32_t *ms);

/* Go's strconv.ParseInt(s, base, 64). Returns 0, or -EINVAL (syntax) / -ERANGE (range). */
int kvctl_parse_int64(const char *s, int base, int64_t *out);

/* The message strconv.ParseInt's error gives: `strconv.ParseInt: parsing "x": invalid syntax`. */
void kvctl_parse_int_err(char *buf, size_t len, const char *s, int rc);

#endif
