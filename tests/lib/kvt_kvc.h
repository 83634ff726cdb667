/*
 * kvt_kvc: libkvclient clients for tests. A library of its own (kvt_kvc) because kvt_lib
 * must not depend on libkvclient or Criterion.
 *
 * Ownership: the caller closes what it gets (kvc_close). Threads: the test's thread.
 */
#ifndef KVT_KVC_H
#define KVT_KVC_H

#include "kvclient.h"

/* A client of `endpoint` alone (no failover to other members), with the library's defaults;
 * fails the test if kvc_open does. */
kvc_client *kvt_kvc_open(const char *endpoint);

#endif
