/*
 * kvctl vs etcdctl 3.4 for DNS SRV discovery (--discovery-srv, --discovery-srv-name,
 * --insecure-discovery; client/kvctl/main.c discover, server/common/dns_srv.h). A DNS responder
 * (tests/lib/kvt_dns) serves the cluster's SRV and A records on 127.53.x.y:53 and each tool
 * runs in a private mount namespace whose /etc/resolv.conf names it (`unshare --mount`: root
 * only). The responder's address follows the client port, which both runs share, so the
 * lookup errors (which name the server) compare equal.
 */
#include <criterion/criterion.h>
#include <unistd.h>

#include "harness.h"
#include "kvt_skip.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Starts the responder (records for kvt.test pointing at this run's member) and defines
 * ns(), which runs a command with its resolv.conf. */
#define DNS_UP                                                                                     \
    "P=${EP#*:}; A=127.53.$((P / 256 % 256)).$((P % 256)); "                                       \
    "$KV_BUILD_DIR/tests/lib/kvt_dns --addr $A --resolv-conf $W/rc --life 60 "                     \
    "--srv _etcd-client._tcp.kvt.test=m1.kvt.test:$P "                                             \
    "--srv _etcd-client-y._tcp.kvt.test=m1.kvt.test:$P --a m1.kvt.test=127.0.0.1 "                 \
    "2>$W/dns.err & D=$!; "                                                                        \
    "for i in $(seq 50); do [ -s $W/rc ] && break; sleep 0.1; done; "                              \
    "ns() { unshare --mount sh -c 'mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"' "          \
    "$W/rc \"$@\"; }; "

Test(kvctl_srv, discovery_srv, .timeout = 300)
{
    if (geteuid() != 0)
        KVT_SKIP_MISSING("needs root (a private mount namespace for /etc/resolv.conf)");
    if (access("/usr/bin/unshare", X_OK) != 0)
        KVT_SKIP_MISSING("unshare not installed (util-linux)");
    static const struct h_step steps[] = {
        {DNS_UP
         /* the SRV records' endpoints replace --endpoints */
         "ns $TOOL --endpoints 127.0.0.1:1 --discovery-srv kvt.test put k v; echo rc=$?; "
         "ns $TOOL --endpoints 127.0.0.1:1 -d kvt.test get k; echo rc=$?; "
         /* --discovery-srv-name: _etcd-client-y._tcp */
         "ns $TOOL -d kvt.test --discovery-srv-name y get k --print-value-only; echo rc=$?; "
         /* no records: both lookups' errors, exit 1 */
         "ns $TOOL -d nope.test get k; echo rc=$?; "
         "ns $TOOL -d kvt.test --discovery-srv-name x get k; echo rc=$?; "
         /* --insecure-discovery=false drops http:// endpoints; none left: --endpoints */
         "ns $TOOL -d kvt.test --insecure-discovery=false --endpoints $EP get k; echo rc=$?; "
         /* member list through the discovered endpoint */
         "ns $TOOL -d kvt.test member list; echo rc=$?; "
         "kill $D",
         0},
    };
    h_compare(steps, N(steps));
}
