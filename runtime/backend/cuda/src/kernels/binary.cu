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

// Whether `F` is the division, whose integer forms report a zero divisor.
template <typename F> struct IsDiv { static constexpr bool value = false; };
template <> struct IsDiv<B_Div> { static constexpr bool value = true; };
// A zero integer divisor (float division by zero is IEEE inf or NaN, not a fault).
__device__ __forceinline__ bool zero_divisor(float) { return false; }
template <typename C> __device__ __forceinline__ bool zero_divisor(C b) { return b == C(0); }

// `fault` (null when the op cannot fault): words [code, value] that an integer division
// by zero sets to [FAULT_DIV_BY_ZERO, 0]; the backend reads it when the result is read.
template <typename T, typename F>
__device__ __forceinline__ void binary_map(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                           u64 n, const Layout& L, int contiguous, u64* fault) {
    if (contiguous) {
        GRID_LOOP(i, n) {
            const auto bv = Num<T>::load(b[i]);
            if (IsDiv<F>::value && fault && zero_divisor(bv)) fault[0] = FAULT_DIV_BY_ZERO;
            out[i] = Num<T>::store(F::apply(Num<T>::load(a[i]), bv));
        }
    } else {
        GRID_LOOP(i, n) {
            u64 oa, ob;
            layout_offsets(L, i, oa, ob);
            const auto bv = Num<T>::load(b[ob]);
            if (IsDiv<F>::value && fault && zero_divisor(bv)) fault[0] = FAULT_DIV_BY_ZERO;
            out[i] = Num<T>::store(F::apply(Num<T>::load(a[oa]), bv));
        }
    }
}

#define BINARY(NAME, F, T) \
    extern "C" __global__ void NAME(const T* a, const T* b, T* out, u64 n, Layout L, int contiguous, u64* fault) { \
        binary_map<T, F>(a, b, out, n, L, contiguous, fault); \
    }
