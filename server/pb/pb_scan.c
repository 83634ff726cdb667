/* pb_scan: iterative TxnRequest pre-scan (see pb_scan.h). The wire reader (pb_wire.h)
 * mirrors protobuf-c 1.4, so both sides agree on which bytes are a nested txn. */
#include "pb/pb_scan.h"

#include <stdbool.h>

#include "pb/pb_wire.h"

/* TxnRequest fields. */
enum { TXN_COMPARE = 1, TXN_SUCCESS = 2, TXN_FAILURE = 3 };
/* RequestOp oneof fields (all messages); request_txn is the recursive one. */
enum { OP_RANGE = 1, OP_PUT = 2, OP_DELETE_RANGE = 3, OP_TXN = 4 };
/* InternalRequest fields. */
enum { IR_ID = 1, IR_FIRST_MSG = 3, IR_TXN = 5, IR_LAST_MSG = 10 };

enum { K_TXN, K_OP };

typedef struct frame {
    const uint8_t *p, *end;
    int64_t child_budget; /* K_TXN: budget of its nested txns */
    uint32_t depth;       /* txn level of this frame (a K_OP frame: its parent's) */
    uint8_t kind;
} frame;

typedef struct scan {
    const kv_txn_limits *lim;
    uint32_t max_depth;
    kv_pb_scan_stats st;
    frame stack[2 * KV_TXN_MAX_DEPTH + 2];
    size_t sp;
} scan;

/* Counts the txn at [p, end) (one flat pass that also validates its framing), applies the
 * depth, budget and total rules and pushes its frame. Returns a kv_pb_scan_result; stops at
 * the first violation, so a request far over a limit costs O(limit) fields, not O(len). */
static int enter_txn(scan *s, const uint8_t *p, const uint8_t *end, int64_t budget, uint32_t depth)
{
    if (depth > s->st.depth)
        s->st.depth = depth;
    if (depth > s->max_depth)
        return KV_PB_SCAN_TOO_MANY_OPS;
    uint64_t n[4] = {0, 0, 0, 0};
    for (const uint8_t *q = p; q < end;) {
        kv_pb_field f;
        size_t used = kv_pb_read_field(q, end, &f);
        if (!used)
            return KV_PB_SCAN_MALFORMED;
        q += used;
        if (f.tag >= TXN_COMPARE && f.tag <= TXN_FAILURE) {
            if (f.wt != KV_PB_WT_LEN)
                return KV_PB_SCAN_MALFORMED;
            /* budget <= 2^32 and depth <= 256 levels: no overflow either way */
            if ((int64_t)++n[f.tag] > budget || ++s->st.total > s->lim->max_total)
                return KV_PB_SCAN_TOO_MANY_OPS;
        }
    }
    uint64_t opc = n[TXN_COMPARE];
    if (opc < n[TXN_SUCCESS])
        opc = n[TXN_SUCCESS];
    if (opc < n[TXN_FAILURE])
        opc = n[TXN_FAILURE];
    s->stack[s->sp++] = (frame){p, end, budget - (int64_t)opc, depth, K_TXN};
    return KV_PB_SCAN_OK;
}

/* Walks the tree of the txn at [p, end) depth first, with the explicit stack. */
static int scan_tree(scan *s, const uint8_t *p, const uint8_t *end, uint32_t depth)
{
    s->sp = 0;
    int rc = enter_txn(s, p, end, (int64_t)s->lim->max_ops, depth);
    while (rc == KV_PB_SCAN_OK && s->sp > 0) {
        frame *fr = &s->stack[s->sp - 1];
        if (fr->p == fr->end) {
            s->sp--;
            continue;
        }
        kv_pb_field f;
        size_t used = kv_pb_read_field(fr->p, fr->end, &f);
        if (!used)
            return KV_PB_SCAN_MALFORMED;
        fr->p += used;
        if (fr->kind == K_TXN) {
            /* framing and wire types were checked by enter_txn */
            if (f.tag == TXN_SUCCESS || f.tag == TXN_FAILURE)
                s->stack[s->sp++] =
                    (frame){f.val, f.val + f.vlen, fr->child_budget, fr->depth, K_OP};
            continue;
        }
        if (f.tag < OP_RANGE || f.tag > OP_TXN)
            continue; /* unknown field: skipped, as protobuf-c keeps it opaque */
        if (f.wt != KV_PB_WT_LEN)
            return KV_PB_SCAN_MALFORMED;
        if (f.tag == OP_TXN)
            rc = enter_txn(s, f.val, f.val + f.vlen, fr->child_budget, fr->depth + 1);
    }
    return rc;
}

void kv_txn_limits_init(kv_txn_limits *l, uint32_t max_ops)
{
    l->max_ops = max_ops;
    l->max_depth = KV_TXN_MAX_DEPTH;
    uint64_t flat = 3 * (uint64_t)max_ops;
    l->max_total = flat > KV_TXN_MAX_TOTAL_OPS ? flat : KV_TXN_MAX_TOTAL_OPS;
}

static void scan_init(scan *s, const kv_txn_limits *lim)
{
    s->lim = lim;
    s->max_depth = lim->max_depth < 1                  ? 1
                   : lim->max_depth > KV_TXN_MAX_DEPTH ? KV_TXN_MAX_DEPTH
                                                       : lim->max_depth;
    s->st = (kv_pb_scan_stats){0, 0};
    s->sp = 0;
}

static int finish(const scan *s, int rc, kv_pb_scan_stats *st)
{
    if (st)
        *st = s->st;
    return rc;
}

int kv_pb_scan_txn(const uint8_t *buf, size_t len, const kv_txn_limits *lim, kv_pb_scan_stats *st)
{
    scan s;
    scan_init(&s, lim);
    if (!buf || !len) { /* an empty TxnRequest is valid: one level, no ops */
        s.st.depth = 1;
        return finish(&s, len ? KV_PB_SCAN_MALFORMED : KV_PB_SCAN_OK, st);
    }
    int rc = scan_tree(&s, buf, buf + len, 1);
    return finish(&s, rc, st);
}

int kv_pb_scan_internal(const uint8_t *buf, size_t len, const kv_txn_limits *lim,
                        kv_pb_scan_stats *st)
{
    scan s;
    scan_init(&s, lim);
    if (!buf || !len)
        return finish(&s, len ? KV_PB_SCAN_MALFORMED : KV_PB_SCAN_OK, st);
    int rc = KV_PB_SCAN_OK;
    for (const uint8_t *p = buf, *end = buf + len; p < end && rc == KV_PB_SCAN_OK;) {
        kv_pb_field f;
        size_t used = kv_pb_read_field(p, end, &f);
        if (!used)
            return finish(&s, KV_PB_SCAN_MALFORMED, st);
        p += used;
        if (f.tag == IR_ID && f.wt != KV_PB_WT_VARINT)
            return finish(&s, KV_PB_SCAN_MALFORMED, st);
        if (f.tag >= IR_FIRST_MSG && f.tag <= IR_LAST_MSG && f.wt != KV_PB_WT_LEN)
            return finish(&s, KV_PB_SCAN_MALFORMED, st);
        if (f.tag == IR_TXN)
            rc = scan_tree(&s, f.val, f.val + f.vlen, 1);
    }
    return finish(&s, rc, st);
}
