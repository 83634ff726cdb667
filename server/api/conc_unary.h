/*
 * conc_unary: one proposal or one linearizable read answered as the call's response, for
 * the election and lock methods that wait for nothing (Proclaim, Resign, Leader, Unlock).
 * The state is detached when the call goes away (kv_conc_unary_cancel as on_cancel); the
 * request still completes and is dropped then. Loop thread only.
 */
#ifndef KV_API_CONC_UNARY_H
#define KV_API_CONC_UNARY_H

#include "api/conc_client.h"
#include "grpc/grpc_server.h"

/* Turns the packed response of the request (res->resp) into the call's answer: sends it with
 * kv_reply_message or finishes with an error. Runs only while the call is there. */
typedef void (*kv_conc_answer_fn)(kv_grpc_call *call, const kv_result *res);

/* Proposes m as InternalRequest field `field` (or, with field 0, runs m as a linearizable
 * Range) and answers the call with answer. Errors of either are answered as they are. */
void kv_conc_unary(kv_grpc_call *call, const kv_conc_ident *id, int field,
                   const ProtobufCMessage *m, kv_conc_answer_fn answer);
void kv_conc_unary_cancel(kv_grpc_call *call);

#endif
