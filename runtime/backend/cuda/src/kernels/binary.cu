// Broadcasting elementwise binary ops: symbols `<op>_<dtype>` (add_f32, maximum_u8, ...).
// The output is contiguous; `L` maps each output index to the offsets of a (sa) and
// b (sb), with stride 0 on broadcast axes. `contiguous` != 0 skips the index math when
// both inputs already have the output's shape.

struct B_Add { template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return add_(a, b); } };
struct B_Sub { template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return sub_(a, b); } };
struct B_Mul { template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return mul_(a, b); } };
struct B_Div { template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return div_(a, b); } };
struct B_Maximum { template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return max_(a, b); } };
struct B_Minimum { template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return min_(a, b); } };

template <typename T, typename F>
__device__ __forceinline__ void binary_map(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                           u64 n, const Layout& L, int contiguous) {
    if (contiguous) {
        GRID_LOOP(i, n) { out[i] = Num<T>::store(F::apply(Num<T>::load(a[i]), Num<T>::load(b[i]))); }
    } else {
        GRID_LOOP(i, n) {
            u64 oa, ob;
            layout_offsets(L, i, oa, ob);
            out[i] = Num<T>::store(F::apply(Num<T>::load(a[oa]), Num<T>::load(b[ob])));
        }
    }
}

#define BINARY(NAME, F, T) \
    extern "C" __global__ void NAME(const T* a, const T* b, T* out, u64 n, Layout L, int contiguous) { \
        binary_map<T, F>(a, b, out, n, L, contiguous); \
    }
