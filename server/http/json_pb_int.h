/* json_pb_int.h - shared by json_pb.c (JSON -> protobuf) and json_pb_write.c. Private. */
#ifndef KV_JSON_PB_INT_H
#define KV_JSON_PB_INT_H

#include <protobuf-c/protobuf-c.h>

#include <stddef.h>

#include "pb_util.h" /* kv_pb_elem_size: element size of a field type */

#endif
