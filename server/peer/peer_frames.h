/*
 * peer_frames: THE table of frame types on the peer transport. peer_net.h moves frames
 * opaquely (a type and bytes); each module that speaks on it owns a row here and registers its
 * handlers with the node (kv_node_set_peer_handler, node.h; the node's own are 1 to 15, other
 * modules' from KV_NODE_PEER_TYPE_MIN = 16). A new frame type is added here, nowhere else, so
 * two modules can never pick the same number. Numbers are wire format: never reuse or renumber.
 */
#ifndef KV_PEER_FRAMES_H
#define KV_PEER_FRAMES_H

enum kv_peer_frame {
    /* the node (server/node/): raft and what rides with it */
    KV_PEER_T_RAFT = 1,         /* kvdraftpb.Message */
    KV_PEER_T_FORWARD = 2,      /* kvdraftpb.Forward: a follower's proposal for the leader */
    KV_PEER_T_FORWARD_RESP = 3, /* kvdraftpb.ForwardResp: the leader refused it */
    KV_PEER_T_READ_REQ = 4,     /* kvdraftpb.ReadIndexReq */
    KV_PEER_T_READ_RESP = 5,    /* kvdraftpb.ReadIndexResp */
    /* lease renewals through a follower (server/lease/lease_fwd.c) */
    KV_LEASE_FWD_REQ = 16,  /* LeaseRenewBatch, follower -> leader */
    KV_LEASE_FWD_RESP = 17, /* LeaseRenewResp, leader -> follower */
    /* corruption checks (server/corrupt/) */
    KV_CORRUPT_HASH_REQ = 18,  /* CorruptHashReq, any member -> a peer */
    KV_CORRUPT_HASH_RESP = 19, /* CorruptHashResp, the answer */
};

#endif
