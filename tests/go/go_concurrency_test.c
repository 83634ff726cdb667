/*
 * go_concurrency_test: builds tests/go/concurrency_test (a Go program using clientv3's
 * concurrency.NewMutex, NewElection and NewSTM, and the v3electionpb/v3lockpb service stubs)
 * offline from Debian's golang-etcd-server-dev
 * and runs it against a fresh server (KV_TEST_SERVER=etcd|kvd, default kvd). Skipped with a
 * message when go or the Go etcd sources are not installed
 * (apt-get install golang-go golang-etcd-server-dev).
 */
#include <criterion/criterion.h>
#include "kvt_skip.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define GOPATH "/usr/share/gocode"

static const char *go_bin(void)
{
    const char *env = getenv("KV_GO_BIN");
    if (env && access(env, X_OK) == 0)
        return env;
    return access("/usr/bin/go", X_OK) == 0 ? "/usr/bin/go" : NULL;
}

Test(go_concurrency, mutex_election_stm, .timeout = 600)
{
    const char *go = go_bin();
    if (!go)
        KVT_SKIP_MISSING("go is not installed (apt-get install golang-go golang-etcd-server-dev): "
                         "Go clientv3/concurrency test skipped");
    if (access(GOPATH "/src/go.etcd.io/etcd/clientv3/concurrency/mutex.go", R_OK) != 0)
        KVT_SKIP_MISSING("golang-etcd-server-dev is not installed (" GOPATH
                         "/src/go.etcd.io/etcd/clientv3 missing): Go clientv3/concurrency test "
                         "skipped");
    char out[1024], cache[1024], env_cache[1100], pkg[1024];
    snprintf(out, sizeof out, "%s/concurrency_test", KV_GO_OUT_DIR);
    snprintf(cache, sizeof cache, "%s/gocache", KV_GO_OUT_DIR);
    snprintf(env_cache, sizeof env_cache, "GOCACHE=%s", cache);
    snprintf(pkg, sizeof pkg, "%s/main.go", KV_GO_SRC_DIR);
    const char *env[] = {"GO111MODULE=off", "GOPATH=" GOPATH, env_cache, "GOFLAGS=",
                         "GOPROXY=off",     "CGO_ENABLED=0",  NULL};
    const char *build[] = {go, "build", "-o", out, pkg, NULL};
    kv_it_cmd_result br;
    cr_assert_eq(kv_it_run(build, env, NULL, 0, 480000, &br), 0, "spawn go build");
    cr_assert(br.exit_code == 0 && !br.timed_out, "go build failed (%d):\n%s\n%s", br.exit_code,
              br.out, br.err);
    kv_it_cmd_result_free(&br);

    kv_it_server srv;
    kv_it_kind kind = kv_it_kind_from_env();
    cr_assert_eq(kv_it_server_init(&srv, kind, NULL), 0, "server init");
    cr_assert_eq(kv_it_server_start(&srv, 20000), 0, "%s start", kv_it_kind_name(kind));
    const char *run[] = {out, srv.endpoint, NULL};
    kv_it_cmd_result rr;
    cr_assert_eq(kv_it_run(run, NULL, NULL, 0, 120000, &rr), 0, "spawn concurrency_test");
    int ok = rr.exit_code == 0 && !rr.timed_out && strstr(rr.out, "PASS\n");
    cr_expect(ok, "Go clientv3/concurrency against %s failed (exit %d%s):\n%s%s",
              kv_it_kind_name(kind), rr.exit_code, rr.timed_out ? ", timed out" : "", rr.out,
              strstr(rr.err, "Unimplemented")
                  ? "(the server answered Unimplemented: a server without the election and lock "
                    "services)\n"
                  : "");
    kv_it_cmd_result_free(&rr);
    kv_it_server_destroy(&srv);
}
