/*
 * member_urls: validation of member URL lists as etcd 3.4's types.NewURLs (pkg/types/urls.go),
 * which MemberAdd applies to the peer URLs of a new member (any failure is answered
 * INVALID_ARGUMENT "etcdserver: given member URLs are invalid").
 *
 * A URL is accepted when, after trimming surrounding white space, it has the scheme http,
 * https, unix or unixs, a "host:port" authority (net.SplitHostPort: an IPv6 host in brackets,
 * the port may be empty) and no path. Pure functions, any thread.
 */
#ifndef KV_API_MEMBER_URLS_H
#define KV_API_MEMBER_URLS_H

#include <stddef.h>

/* 0 if every URL of the list is valid and the list is not empty, -EINVAL otherwise.
 * On success out (cap entries, may be NULL) gets the trimmed URLs, malloc'd, sorted as etcd's
 * URLs.Sort (byte order of the string form); the caller frees them with kv_member_urls_free.
 * -E2BIG when n > cap, -ENOMEM. */
int kv_member_urls_parse(char *const *in, size_t n, char **out, size_t cap);
void kv_member_urls_free(char **v, size_t n);

#endif
