// dequantize.cpp: dequantize_weights_f32 (model_file.h): replaces a model file's quantized role tensors
// by f32 copies (datagen --f32-weights); tensor_to_f32 (loader_common.h), the one such copy.
#include "loader_common.h"
#include "model_file.h"

namespace beagle {

void tensor_to_f32(ModelFile& mf, Tensor& t) {
    if (t.dtype == DType::F32 || t.data == nullptr) return;
    std::vector<uint8_t> buf((size_t)t.numel() * sizeof(float));
    for (int64_t r = 0; r < t.rows(); r++) dequantize_row(t.dtype, t.row(r), (float*)buf.data() + r * t.cols(), t.cols());
    t.dtype = DType::F32;
    t.nbytes = buf.size();
    mf.owned.push_back(std::move(buf));
    t.data = mf.owned.back().data();  // vector moves keep the heap buffer
}

void dequantize_weights_f32(ModelFile& mf) {
    LlamaWeights& w = mf.weights;
    bool tied = w.lm_head.data == w.tok_embd.data;
    tensor_to_f32(mf, w.tok_embd);
    if (tied) w.lm_head = w.tok_embd;
    else tensor_to_f32(mf, w.lm_head);
    for (LayerWeights& l : w.layers)
        for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.attn_norm, &l.ffn_norm}) tensor_to_f32(mf, *t);
    tensor_to_f32(mf, w.out_norm);
}

}  // namespace beagle
