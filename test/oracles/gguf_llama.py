# gguf_llama.py: writes the parts of a small Llama GGUF that the oracle tests share (not a test itself):
# the writer with the model's hyperparameters, a toy SentencePiece-style vocabulary and the tensor list of
# L layers (output.weight unless tied), each matrix made by the caller's mat(name, rows, cols) (so each test picks its tensor types)
# and each norm vector by vec(name, n).
import gguf


def new_llama_writer(path, ctx, dim, L, H, KV, F):
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(ctx)
    w.add_embedding_length(dim)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_dimension_count(dim // H)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    return w


def add_toy_vocab(w, V):
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, V)])
    w.add_token_scores([-float(i) for i in range(V)])
    w.add_token_types([2, 3, 3] + [1] * (V - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def add_llama_tensors_and_close(w, mat, vec, L, V, dim, H, KV, hd, F, tied=False):
    mat("token_embd.weight", V, dim)
    vec("output_norm.weight", dim)
    if not tied:
        mat("output.weight", V, dim)
    for l in range(L):
        b = f"blk.{l}."
        vec(b + "attn_norm.weight", dim)
        mat(b + "attn_q.weight", H * hd, dim)
        mat(b + "attn_k.weight", KV * hd, dim)
        mat(b + "attn_v.weight", KV * hd, dim)
        mat(b + "attn_output.weight", dim, H * hd)
        vec(b + "ffn_norm.weight", dim)
        mat(b + "ffn_gate.weight", F, dim)
        mat(b + "ffn_up.weight", F, dim)
        mat(b + "ffn_down.weight", dim, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
