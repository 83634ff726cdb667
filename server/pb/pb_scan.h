/*
 * pb_scan: a non-recursive pre-scan of the wire bytes of an etcdserverpb.TxnRequest (or of a
 * kvdpb.InternalRequest carrying one), run BEFORE protobuf-c unpacks them.
 *
 * Why: TxnRequest -> RequestOp.request_txn -> TxnRequest is the only recursive message type
 * a client can send (no other message in proto/ has a cycle), and protobuf_c_message_unpack(),
 * then kvd's checks, apply, response packing and free, recurse once per nesting level. A Txn
 * nested 5,000 levels deep (34 KB) overflowed the apply worker's stack. This
 * scan walks the bytes with an explicit stack whose size is fixed by KV_TXN_MAX_DEPTH and
 * never recurses, so a request that passes it is safe to unpack and to process recursively.
 *
 * What it enforces, answered as etcd's ErrGRPCTooManyOps (KV_ERR_TOO_MANY_OPS: INVALID_ARGUMENT
 * "etcdserver: too many operations in txn request"):
 * - etcd's checkTxnRequest budget: a txn's opc = max(#compare, #success, #failure) must not
 *   exceed its budget; the top level's budget is max_ops (--max-txn-ops), a nested txn's is
 *   its parent's budget minus the parent's opc. Each level costs at least one op, so this
 *   alone bounds the depth to max_ops + 1 (129 by default), as in etcd.
 * - a hard depth cap (max_depth, at most KV_TXN_MAX_DEPTH): --max-txn-ops goes up to 2^20,
 *   and the stack must stay bounded whatever the flag says. etcd has no such cap (Go stacks
 *   grow); kvd answers too many operations past it.
 * - a cap on compares + ops counted over the whole tree (max_total): etcd's budget allows
 *   exponentially many ops across levels (64 txns of 64 ops each, ...), bounded only by the
 *   message size; unpacked they cost memory and the duplicate-key check costs CPU.
 * Counts are per wire occurrence (an upper bound of what protobuf-c builds: a oneof field
 * sent twice is unpacked twice and the last one kept), so the scan is never more lenient than
 * the tree that will be unpacked; the exact etcd checks still run on the unpacked request.
 * The scan stops at the first violation (a 2 MiB flat txn of 300,000 ops is refused at its
 * 129th op, not after 20 ms of scanning on the loop), so bytes that are both over a limit and
 * malformed after that point get "too many operations" where etcd, which unmarshals first,
 * reports the unmarshal error.
 *
 * Malformed framing is reported with the rules of protobuf-c 1.4 (tags of at most 5 bytes,
 * tag 0 refused, varints of at most 10 bytes, length prefixes of at most 5 bytes and at most
 * INT_MAX, group wire types 3/4 and types 6/7 refused, a known message field with another
 * wire type refused). Only the recursive path (TxnRequest, RequestOp) is parsed field by
 * field; Compare, Range/Put/DeleteRange bodies are skipped by their length and left to
 * protobuf-c, which refuses them if they are malformed.
 *
 * Pure functions of their input: no allocation, no global state, any thread. O(len) time;
 * every byte is read at most twice.
 */
#ifndef KV_PB_SCAN_H
#define KV_PB_SCAN_H

#include <stddef.h>
#include <stdint.h>

/* Hard cap on txn nesting (top-level txn = depth 1). etcd's default budget (128 ops) allows
 * depth 129. protobuf-c's unpack alone takes ~1.7-2 KB of stack per level (4,000 levels fit
 * the 8 MiB libuv worker stack, 5,000 did not), so 256 levels stay far below it; the ASan
 * build applies and answers a 256-deep txn (tests/adversarial/test_input.c). */
#define KV_TXN_MAX_DEPTH 256
/* Minimum cap on compares + ops over the whole tree; kv_txn_limits_init raises it to
 * 3 * max_ops so that every flat txn etcd accepts is accepted. Measured cost at the cap (the
 * duplicate-key check, txn_check.c, on the apply thread): 4,096 puts over 3 levels 1.6 ms;
 * half puts, half deletes (linear interval scan) ~30 ms. Without a cap a 2 MiB request holds
 * ~500,000 ops. */
#define KV_TXN_MAX_TOTAL_OPS 4096
/* The largest --max-txn-ops, and the op budget the apply itself uses (server/apply/applier.c):
 * a member's --max-txn-ops is checked where it takes the request, before proposing, as etcd
 * 3.4 does; the apply must not depend on it, or members whose flags differ would apply the
 * same entry differently. */
#define KV_TXN_MAX_OPS_LIMIT (1u << 20)

typedef struct kv_txn_limits {
    uint32_t max_ops;   /* etcd --max-txn-ops: budget of the top-level txn */
    uint32_t max_depth; /* 1..KV_TXN_MAX_DEPTH (larger values are clamped) */
    uint64_t max_total; /* compares + ops over the whole tree */
} kv_txn_limits;

/* max_ops as --max-txn-ops; depth KV_TXN_MAX_DEPTH; total max(KV_TXN_MAX_TOTAL_OPS,
 * 3 * max_ops). */
void kv_txn_limits_init(kv_txn_limits *l, uint32_t max_ops);

enum kv_pb_scan_result {
    KV_PB_SCAN_OK = 0,
    KV_PB_SCAN_TOO_MANY_OPS = 1, /* budget, depth or total exceeded */
    KV_PB_SCAN_MALFORMED = 2,    /* protobuf-c would refuse the bytes */
};

/* What the scan saw (for tests and diagnostics); valid for every result. depth is the
 * deepest txn level reached (the scan stops at max_depth + 1); total counts compares + ops
 * seen (up to the first violation). */
typedef struct kv_pb_scan_stats {
    uint32_t depth;
    uint64_t total;
} kv_pb_scan_stats;

/* Scans buf[0..len) as a TxnRequest. lim must not be NULL; st may be NULL.
 * Returns an enum kv_pb_scan_result. */
int kv_pb_scan_txn(const uint8_t *buf, size_t len, const kv_txn_limits *lim, kv_pb_scan_stats *st);

/* Scans buf[0..len) as an InternalRequest: every occurrence of its txn field (5) is scanned
 * as a TxnRequest (protobuf-c unpacks each), with the total counted across occurrences. */
int kv_pb_scan_internal(const uint8_t *buf, size_t len, const kv_txn_limits *lim,
                        kv_pb_scan_stats *st);

#endif
