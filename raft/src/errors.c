/*
 * errors.c - raft_strerror(): names for the RAFT_E* codes of raft.h.
 * Contract: returns a static string; never NULL; unknown codes map to
 * "unknown error".
 */
#include "internal.h"

const char *raft_strerror(int err)
{
    switch (err) {
    case 0:
        return "ok";
    case RAFT_EINVAL:
        return "invalid argument";
    case RAFT_ENOMEM:
        return "out of memory";
    case RAFT_ENOLEADER:
        return "no leader known";
    case RAFT_ENOTLEADER:
        return "not the leader";
    case RAFT_EBUSY:
        return "limit reached, retry later";
    case RAFT_ECONFPENDING:
        return "configuration change pending";
    case RAFT_EAGAIN:
        return "leader has not committed an entry of its term yet";
    case RAFT_ECOMPACTED:
        return "log index compacted";
    case RAFT_EUNAVAILABLE:
        return "log index unavailable";
    case RAFT_ETRANSFER:
        return "leadership transfer in progress";
    case RAFT_ECORRUPT:
        return "message violates protocol invariants";
    default:
        return "unknown error";
    }
}

const char *raft_role_name(int role)
{
    switch (role) {
    case RAFT_FOLLOWER:
        return "follower";
    case RAFT_PRECANDIDATE:
        return "pre-candidate";
    case RAFT_CANDIDATE:
        return "candidate";
    case RAFT_LEADER:
        return "leader";
    default:
        return "?";
    }
}
