/* The initial membership from the flags, the publish request (server/daemon/members_boot.h) and the
 * MemberAdd URL checks (server/api/member_urls.h). */
#include "api/member_urls.h"
#include "daemon/config.h"
#include "daemon/identity.h"
#include "daemon/members_boot.h"
#include "daemon/members_join.h"
#include "apply/apply.h"
#include "mvcc/members.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Three members, "b" with two peer URLs (filled in directly: the flag parser still refuses
 * multi-member clusters until the raft transport is wired in). */
static void three_members(kv_config *c, kv_identity *id)
{
    static const char *const names[] = {"a", "b", "c", "b"};
    static const char *const urls[] = {"http://10.0.0.1:2380", "http://10.0.0.2:2380",
                                       "http://10.0.0.3:2380", "http://10.0.0.2:2381"};
    kv_config_default(c);
    snprintf(c->name, sizeof(c->name), "b");
    c->n_initial_cluster = 4;
    for (size_t i = 0; i < 4; i++) {
        snprintf(c->initial_cluster[i].name, sizeof(c->initial_cluster[i].name), "%s", names[i]);
        snprintf(c->initial_cluster[i].url.text, sizeof(c->initial_cluster[i].url.text), "%s",
                 urls[i]);
    }
    c->n_advertise_client = 1;
    snprintf(c->advertise_client[0].text, sizeof(c->advertise_client[0].text),
             "http://10.0.0.2:2379");
    cr_assert_eq(kv_identity_compute(c, id), 0);
    cr_assert_eq(id->n_members, 3);
}

Test(members_boot, initial_members_from_the_flags)
{
    kv_config c;
    kv_identity id;
    three_members(&c, &id);
    Kvdpb__Member **v;
    size_t n;
    cr_assert_eq(kv_members_from_config(&c, &id, &v, &n), 0);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(v[0]->name, "a");
    cr_assert_eq(v[0]->id, id.member_ids[0]);
    cr_assert_str_eq(v[1]->name, "b");
    cr_assert_eq(v[1]->id, id.member_id);
    cr_assert_eq(v[1]->n_peer_urls, 2);
    cr_assert_str_eq(v[1]->peer_urls[1], "http://10.0.0.2:2381");
    cr_assert_eq(v[1]->n_client_urls, 0); /* published later */
    cr_assert_eq(v[2]->is_learner, 0);
    kv_store_members_free(v, n);
}

Test(members_boot, bootstrap_then_publish_through_the_store)
{
    kv_config c;
    kv_identity id;
    three_members(&c, &id);
    char dir[] = "/tmp/kvd-members-boot-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    kv_store_config sc;
    kv_store_config_default(&sc);
    sc.dir = dir;
    kv_store *st;
    cr_assert_eq(kv_store_open(&st, &sc), 0);
    cr_assert_eq(kv_members_bootstrap_config(st, &c, &id), 1);
    cr_assert_eq(kv_members_bootstrap_config(st, &c, &id), 0); /* a restart: nothing */

    uint8_t *req;
    size_t len;
    cr_assert_eq(kv_members_publish_request(&c, &id, &req, &len), 0);
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(st, &b), 0);
    kv_result res;
    cr_assert_eq(kv_store_apply(st, b, 1, req, len, NULL, &res), 0);
    cr_assert_eq((int)res.err, 0, "%s", kv_etcd_err_msg(res.err));
    free(res.resp);
    free(req);
    cr_assert_eq(kv_store_batch_commit(st, b), 0);

    Kvdpb__Member *m;
    cr_assert_eq(kv_store_member_get(st, id.member_id, &m), 0);
    cr_assert_str_eq(m->name, "b");
    cr_assert_eq(m->n_client_urls, 1);
    cr_assert_str_eq(m->client_urls[0], "http://10.0.0.2:2379");
    cr_assert_eq(m->n_peer_urls, 2);
    kvdpb__member__free_unpacked(m, NULL);
    kv_store_close(st);
    cr_assert_eq(kvt_rmtree(dir), 0);
}

static int parse1(const char *u)
{
    char *in[] = {(char *)u};
    char *out[1] = {NULL};
    int rc = kv_member_urls_parse(in, 1, out, 1);
    kv_member_urls_free(out, rc == 0 ? 1 : 0);
    return rc;
}

Test(member_urls, etcd_new_urls_rules)
{
    cr_assert_eq(parse1("http://127.0.0.1:2380"), 0);
    cr_assert_eq(parse1("  https://host:1  "), 0);
    cr_assert_eq(parse1("http://[::1]:2380"), 0);
    cr_assert_eq(parse1("unix://sock:0"), 0);
    cr_assert_eq(parse1("http://host:"), 0); /* net.SplitHostPort accepts an empty port */
    cr_assert_eq(parse1("ftp://host:1"), -EINVAL);
    cr_assert_eq(parse1("host:1"), -EINVAL);
    cr_assert_eq(parse1("http://host"), -EINVAL);
    cr_assert_eq(parse1("http://::1:2380"), -EINVAL);
    cr_assert_eq(parse1("http://host:1/path"), -EINVAL);
    cr_assert_eq(parse1(""), -EINVAL);
    char *none[] = {NULL};
    cr_assert_eq(kv_member_urls_parse(none, 0, NULL, 0), -EINVAL); /* no valid URLs given */
    char *two[] = {"http://b:1", "http://a:1"};
    char *out[2];
    cr_assert_eq(kv_member_urls_parse(two, 2, out, 1), -E2BIG);
    cr_assert_eq(kv_member_urls_parse(two, 2, out, 2), 0);
    cr_assert_str_eq(out[0], "http://a:1"); /* sorted, as etcd's URLs.Sort */
    cr_assert_str_eq(out[1], "http://b:1");
    kv_member_urls_free(out, 2);
}

/* etcd's GET /members JSON (server/daemon/members_join.h): written as etcd 3.4 writes it, read back
 * (also etcd's own output with fields kvd ignores), and matched by peer URLs in any order. */
Test(members_join, json_round_trip_and_url_match)
{
    kv_config c;
    kv_identity id;
    three_members(&c, &id);
    Kvdpb__Member **m;
    size_t n;
    cr_assert_eq(kv_members_from_config(&c, &id, &m, &n), 0);
    free(m[0]->name);
    m[0]->name = strdup("a \"quoted\"\\name");
    char *json;
    size_t len;
    cr_assert_eq(kv_members_json((const Kvdpb__Member *const *)m, n, &json, &len), 0);
    cr_assert_eq(strlen(json), len);
    Kvdpb__Member **r;
    size_t nr;
    cr_assert_eq(kv_members_parse_json(json, len, &r, &nr), 0, "%s", json);
    cr_assert_eq(nr, n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(r[i]->id, m[i]->id);
        cr_assert_str_eq(r[i]->name, m[i]->name);
        cr_assert_eq(r[i]->n_peer_urls, m[i]->n_peer_urls);
        for (size_t k = 0; k < m[i]->n_peer_urls; k++)
            cr_assert_str_eq(r[i]->peer_urls[k], m[i]->peer_urls[k]);
    }
    const char *b_urls[] = {"http://10.0.0.2:2381", "http://10.0.0.2:2380"};
    const Kvdpb__Member *b = kv_members_match_urls(r, nr, b_urls, 2);
    cr_assert(b && b->id == id.member_id);
    cr_assert_null(kv_members_match_urls(r, nr, b_urls, 1)); /* a subset is no match */
    free(json);
    kv_store_members_free(r, nr);
    kv_store_members_free(m, n);
    /* etcd 3.4's own answer, with a learner and an unknown field */
    const char *etcd = "[{\"id\":10501334649042878790,\"peerURLs\":[\"http://127.0.0.1:2380\"],"
                       "\"name\":\"infra1\",\"clientURLs\":[\"http://127.0.0.1:2379\"]},"
                       " {\"id\":1,\"peerURLs\":[\"https://h:1\"],\"isLearner\":true,"
                       "\"x\":{\"y\":[1,2.5e3,null,false]}}]\n";
    cr_assert_eq(kv_members_parse_json(etcd, strlen(etcd), &r, &nr), 0);
    cr_assert_eq(nr, 2);
    cr_assert_eq(r[0]->id, 10501334649042878790ull);
    cr_assert_str_eq(r[0]->client_urls[0], "http://127.0.0.1:2379");
    cr_assert(r[1]->is_learner && r[1]->id == 1);
    kv_store_members_free(r, nr);
    /* not a member list */
    static const char *const bad[] = {"",
                                      "{}",
                                      "[{\"id\":0,\"peerURLs\":[\"http://a:1\"]}]",
                                      "[{\"id\":1}]",
                                      "[{\"id\":1,\"peerURLs\":[\"http://a:1\"]",
                                      "[{\"id\":\"1\",\"peerURLs\":[\"http://a:1\"]}]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(kv_members_parse_json(bad[i], strlen(bad[i]), &r, &nr), -EINVAL, "%s", bad[i]);
}
