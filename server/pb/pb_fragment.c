/* pb_fragment: etcd's sendFragments cut (see pb_fragment.h). */
#include "pb/pb_fragment.h"

#include "common/varint.h"

size_t kv_pb_fragment_events(Mvccpb__Event *const *evs, size_t n, size_t base, size_t limit)
{
    size_t sz = base, k = 0;
    while (k < n) {
        size_t l = mvccpb__event__get_packed_size(evs[k]);
        size_t add = 1 + kv_varint_len(l) + l; /* field 11, length-delimited: 1-byte tag */
        if (k >= 1 && sz + add >= limit)
            break;
        sz += add;
        k++;
    }
    return k;
}
