/* kernel_operator_list_tensor_intf.h -- Ascend C's ListTensorDesc / TensorDesc for canna's simulator.
 *
 * A list of tensors in global memory (an op's dynamic input, or built by a host program), read by
 * index on the kernel side (Ascend C API reference, "ListTensorDesc", "TensorDesc"). The layout,
 * in 64-bit words from the start of the list (as the public AddN kernel-launch sample's host code
 * builds it, and as the ListTensorDesc constructor's length rule counts it):
 *
 *     word 0                 ptrOffset: the byte offset of the data pointers from the start
 *     then, per tensor i     one word: dim (low 32 bits) and index (high 32 bits), then dim shape words
 *     at ptrOffset           the data pointers, one word per tensor
 *
 * The number of tensors is the number of descriptions before ptrOffset. A list that does not parse
 * (a description running past ptrOffset, an index out of range, a length or pointer count that
 * disagrees with the constructor's optional checks) is a fault of the block naming the line.
 */
#ifndef CANNA_KERNEL_OPERATOR_LIST_TENSOR_INTF_H
#define CANNA_KERNEL_OPERATOR_LIST_TENSOR_INTF_H

#include "kernel_operator.h"

#define CANNA_LOC_ ::canna_sim::Loc loc = ::canna_sim::Loc::here()

namespace AscendC {

class ListTensorDesc;

template <class T> class TensorDesc {
public:
    TensorDesc() = default;
    void SetShapeAddr(uint64_t *shapePtr) { shape_ = shapePtr; }
    uint64_t GetDim() const { return dim_; }
    uint64_t GetIndex() const { return index_; }
    uint64_t GetShape(uint32_t offset, CANNA_LOC_) const
    {
        if (!shape_ || offset >= dim_)
            canna_sim::fault(loc, "TensorDesc::GetShape: dimension %u is out of range of a tensor of %llu dimensions",
                             offset, (unsigned long long)dim_);
        return shape_[offset];
    }
    T *GetDataPtr() const { return data_; }
    GlobalTensor<T> GetDataObj() const
    {
        GlobalTensor<T> g;
        g.SetGlobalBuffer(data_);
        return g;
    }

private:
    friend class ListTensorDesc;
    uint64_t *shape_ = nullptr;
    uint64_t dim_ = 0, index_ = 0;
    T *data_ = nullptr;
};

class ListTensorDesc {
public:
    ListTensorDesc() = default;
    ListTensorDesc(void *data, uint32_t length = 0xffffffffu, uint32_t shapeSize = 0xffffffffu, CANNA_LOC_)
    {
        Init(data, length, shapeSize, loc);
    }
    void Init(void *data, uint32_t length = 0xffffffffu, uint32_t shapeSize = 0xffffffffu, CANNA_LOC_)
    {
        base_ = static_cast<uint64_t *>(data);
        canna_sim::gm_check(loc, "ListTensorDesc", base_, 8);
        uint64_t off = base_[0];
        if (off < 8 || off % 8)
            canna_sim::fault(loc, "ListTensorDesc: the data pointers' offset %llu (word 0) is not a multiple of 8 "
                             "bytes past the header", (unsigned long long)off);
        canna_sim::gm_check(loc, "ListTensorDesc", base_, off);
        words_ = off / 8;
        count_ = 0;
        for (uint64_t w = 1; w < words_; count_++) {
            uint64_t dim = base_[w] & 0xffffffffu;
            if (w + 1 + dim > words_)
                canna_sim::fault(loc, "ListTensorDesc: the description of tensor %u (%llu dimensions at word %llu) "
                                 "runs past the data pointers at byte %llu", count_, (unsigned long long)dim,
                                 (unsigned long long)w, (unsigned long long)off);
            w += 1 + dim;
        }
        if (shapeSize != 0xffffffffu && shapeSize != count_)
            canna_sim::fault(loc, "ListTensorDesc: the list holds %u tensors, not shapeSize %u", count_, shapeSize);
        uint64_t bytes = off + 8ull * count_;
        if (length != 0xffffffffu && length != bytes)
            canna_sim::fault(loc, "ListTensorDesc: the list of %u tensors is %llu bytes, not length %u", count_,
                             (unsigned long long)bytes, length);
        canna_sim::gm_check(loc, "ListTensorDesc", base_, bytes);
    }
    template <class T> void GetDesc(TensorDesc<T> &desc, uint32_t index, CANNA_LOC_) const
    {
        Check(loc, "ListTensorDesc::GetDesc", index);
        if (!desc.shape_)
            canna_sim::fault(loc, "ListTensorDesc::GetDesc: the TensorDesc has no shape buffer (call SetShapeAddr "
                             "first)");
        uint64_t w = 1;
        for (uint32_t i = 0; i < index; i++)
            w += 1 + (base_[w] & 0xffffffffu);
        desc.dim_ = base_[w] & 0xffffffffu;
        desc.index_ = base_[w] >> 32;
        for (uint64_t d = 0; d < desc.dim_; d++)
            desc.shape_[d] = base_[w + 1 + d];
        desc.data_ = reinterpret_cast<T *>(base_[words_ + index]);
    }
    template <class T> T *GetDataPtr(uint32_t index, CANNA_LOC_) const
    {
        Check(loc, "ListTensorDesc::GetDataPtr", index);
        return reinterpret_cast<T *>(base_[words_ + index]);
    }
    uint32_t GetSize() const { return count_; }

private:
    void Check(const canna_sim::Loc &loc, const char *api, uint32_t index) const
    {
        if (!base_)
            canna_sim::fault(loc, "%s: the ListTensorDesc was not initialized (Init)", api);
        if (index >= count_)
            canna_sim::fault(loc, "%s: index %u is out of range of a list of %u tensors", api, index, count_);
    }
    uint64_t *base_ = nullptr;
    uint64_t words_ = 0;
    uint32_t count_ = 0;
};

}  // namespace AscendC

#undef CANNA_LOC_

#endif /* CANNA_KERNEL_OPERATOR_LIST_TENSOR_INTF_H */
