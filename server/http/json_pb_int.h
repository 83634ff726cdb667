/* json_pb_int.h - shared by json_pb.c (JSON -> protobuf) and json_pb_write.c. Private. */
#ifndef KV_JSON_PB_INT_H
#define KV_JSON_PB_INT_H

#include <protobuf-c/protobuf-c.h>

#include <stddef.h>

/* Bytes of one value of the field type in a protobuf-c message struct. */
size_t kv_json_pb_elem_size(ProtobufCType t);

#endif
