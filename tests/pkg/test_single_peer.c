/*
 * A single member and its peer URLs (server/daemon/server.c kv_server_start_core): it listens on
 * them as etcd does (cluster_membership one_member_grows_to_three grows one), and one whose peer
 * URLs it cannot listen on (here unix://, as etcd's e2e TestEtcdUnixPeers uses) still serves
 * clients, with a warning that `member add` cannot grow it.
 */
#include "kvt_proc.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Test(single_peer, a_peer_url_it_cannot_listen_on_does_not_stop_a_single_member, .timeout = 120)
{
    const char *b = getenv("KV_BUILD_DIR");
    cr_assert(b && *b, "KV_BUILD_DIR not set");
    char kvd[PATH_MAX];
    snprintf(kvd, sizeof(kvd), "%s/server/kvd", b);
    cr_assert_eq(access(kvd, X_OK), 0, "%s not built", kvd);
    kvt_tmpdir d;
    cr_assert_eq(kvt_tmpdir_create(&d, "single-peer"), 0);
    char data[PATH_MAX + 16], log[PATH_MAX + 16], purl[PATH_MAX + 32], ic[PATH_MAX + 48];
    snprintf(data, sizeof(data), "%s/data", d.path);
    snprintf(log, sizeof(log), "%s/kvd.log", d.path);
    snprintf(purl, sizeof(purl), "unix://%s/peer.sock:1", d.path);
    snprintf(ic, sizeof(ic), "e1=%s", purl);
    uint16_t cport;
    cr_assert_eq(kvt_port_free(&cport), 0);
    char curl[64];
    snprintf(curl, sizeof(curl), "--listen-client-urls=http://127.0.0.1:%u", cport);
    const char *argv[] = {kvd,
                          "--name",
                          "e1",
                          "--data-dir",
                          data,
                          curl,
                          "--listen-peer-urls",
                          purl,
                          "--initial-advertise-peer-urls",
                          purl,
                          "--initial-cluster",
                          ic,
                          NULL};
    kvt_proc p;
    kvt_proc_init(&p, log);
    cr_assert_eq(kvt_proc_spawn(&p, argv), 0);
    int st = 0;
    char *body = NULL;
    int ok = 0;
    for (uint64_t end = kvt_now_ms() + 60000; !ok && kvt_now_ms() < end;) {
        if (kvt_http_get(cport, "/health", 1000, &st, &body) == 0)
            ok = st == 200 && body && strstr(body, "\"health\":\"true\"");
        free(body);
        body = NULL;
        if (!ok)
            kvt_sleep_ms(100);
    }
    cr_assert(ok, "the member did not serve a healthy /health within 60 s (log %s)", log);
    FILE *f = fopen(log, "r");
    cr_assert(f);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    cr_expect(strstr(buf, "kvd: warning: this single member does not listen on its peer URLs") !=
                  NULL,
              "no warning in the log:\n%s", buf);
    cr_assert_eq(kvt_proc_signal(&p, SIGTERM), 0);
    cr_expect_eq(kvt_proc_wait(&p, 30000), 0);
    cr_expect(WIFEXITED(p.last_status) && WEXITSTATUS(p.last_status) == 0,
              "wait status %#x after SIGTERM", p.last_status);
    kvt_proc_kill9(&p);
    kvt_tmpdir_destroy(&d);
}
