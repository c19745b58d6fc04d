// An attention plugin written in C++ (ABI 2): the descriptor must keep C
// linkage and default visibility (tests/plugin_cli.sh loads it, attn_check
// passes it).
#include <tapegrad/tapegrad.h>

namespace {
tg_tensor *cxx_attention(tg_ctx *ctx, const tg_attn_args *a) { return tg_attend(ctx, a); }
}  // namespace

TG_ATTENTION_PLUGIN(cxx_attention, TG_ATTN_F_ALL)
