// Data movement: embedding gather (`embedding_<dtype>_<id dtype>`) and the strided
// copies behind permute, slice, concat and broadcast (`permute_<dtype>`, ...).
// A strided copy walks `L.dims` in row-major order and copies
// src[src_off + offset_a] to dst[dst_off + offset_b].

template <typename T, typename I>
__device__ __forceinline__ void embedding_gather(const T* __restrict__ table, const I* __restrict__ ids,
                                                 T* __restrict__ out, u64 n_ids, u64 dim, u64 vocab,
                                                 u64* __restrict__ fault) {
    GRID_LOOP(i, n_ids * dim) {
        const u64 r = i / dim, c = i % dim;
        const i64 id = (i64)ids[r];
        const bool in_range = id >= 0 && (u64)id < vocab;
        // An out-of-range id reads nothing (never a wild read), gives a zero row and
        // sets the fault words [FAULT_EMBEDDING_ID, id], which the backend reads when the
        // result is read. Every writer writes a bad id, so any interleaving leaves one.
        if (!in_range && c == 0) {
            fault[1] = (u64)id;
            fault[0] = FAULT_EMBEDDING_ID;
        }
        out[i] = in_range ? table[(u64)id * dim + c] : T();
    }
}

template <typename T>
__device__ __forceinline__ void strided_copy(const T* __restrict__ src, T* __restrict__ dst, u64 n, const Layout& L,
                                             u64 src_off, u64 dst_off) {
    GRID_LOOP(i, n) {
        u64 a, b;
        layout_offsets(L, i, a, b);
        dst[dst_off + b] = src[src_off + a];
    }
}

#define EMBEDDING(NAME, T, I) \
    extern "C" __global__ void NAME(const T* table, const I* ids, T* out, u64 n_ids, u64 dim, u64 vocab, u64* fault) { \
        embedding_gather<T, I>(table, ids, out, n_ids, dim, vocab, fault); \
    }
#define COPY(NAME, T) \
    extern "C" __global__ void NAME(const T* src, T* dst, u64 n, Layout L, u64 src_off, u64 dst_off) { \
        strided_copy<T>(src, dst, n, L, src_off, dst_off); \
    }
