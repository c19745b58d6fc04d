"""Your own PyTorch model, logged for tapegrad's tools: a byte-level causal language model (one or two
attention layers and an MLP) trained with and without the 1/sqrt(d_head) scale, each run logged two
ways: by tapegrad_log's RunLog from the attention weights themselves (run_SCALE_sSEED.tsv), and as a
plain CSV a training loop might write (run_SCALE_sSEED.csv: step, loss, val loss, per-head entropy),
which `tapegrad-logs import` turns into a log.
    python3 train.py --scale none|sqrt --seed 1 [--steps 600] --out DIR --corpus FILE...
"""
import argparse
import csv
import math
import os

import torch

from tapegrad_log import RunLog, head_entropy


class Block(torch.nn.Module):
    def __init__(self, d_model, heads, d_head, scale):
        super().__init__()
        self.h, self.dh, self.scale = heads, d_head, scale
        self.ln1, self.ln2 = torch.nn.LayerNorm(d_model), torch.nn.LayerNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * heads * d_head, bias=False)
        self.out = torch.nn.Linear(heads * d_head, d_model, bias=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d_model, 4 * d_model), torch.nn.GELU(),
                                       torch.nn.Linear(4 * d_model, d_model))

    def forward(self, x, keep):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        s = q @ k.transpose(-1, -2)                       # (B, H, T, T)
        if self.scale == "sqrt":
            s = s / math.sqrt(self.dh)                     # the line the seed's kernel forgot
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        w = s.softmax(-1)
        keep.append((w.detach(), s.detach()))   # views, no copies: read only on a logged step
        x = x + self.out((w @ v).transpose(1, 2).reshape(B, T, -1))
        return x + self.mlp(self.ln2(x))


class Model(torch.nn.Module):
    def __init__(self, layers, d_model, heads, d_head, scale, T):
        super().__init__()
        self.emb, self.pos = torch.nn.Embedding(256, d_model), torch.nn.Embedding(T, d_model)
        self.blocks = torch.nn.ModuleList(Block(d_model, heads, d_head, scale) for _ in range(layers))
        self.ln, self.head = torch.nn.LayerNorm(d_model), torch.nn.Linear(d_model, 256)

    def forward(self, x, y):
        keep = []
        h = self.emb(x) + self.pos(torch.arange(x.shape[1]))
        for b in self.blocks:
            h = b(h, keep)
        return torch.nn.functional.cross_entropy(self.head(self.ln(h)).flatten(0, 1), y.flatten()), keep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", choices=("none", "sqrt"), required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--d-head", type=int, default=128)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--out", default="runs")
    ap.add_argument("--corpus", nargs="+", required=True)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    data = b"".join(open(p, "rb").read() for p in sorted(a.corpus))
    data = torch.tensor(list(data), dtype=torch.long)
    cut = len(data) * 9 // 10
    train, val = data[:cut], data[cut:]
    T = a.seq_len
    gen = torch.Generator().manual_seed(1000 + a.seed)
    vstarts = torch.randint(0, len(val) - T - 1, (32,), generator=torch.Generator().manual_seed(7))
    model = Model(a.layers, a.d_model, a.heads, a.d_head, a.scale, T)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    os.makedirs(a.out, exist_ok=True)
    name = os.path.join(a.out, "run_%s_s%d" % (a.scale, a.seed))
    settings = dict(optim="adamw", lr=a.lr, batch=a.batch, d_model=a.d_model, task="bytes")
    log = RunLog(name + ".tsv", scale=a.scale, steps=a.steps, layers=a.layers, heads=a.heads, seq_len=T,
                 seed=a.seed, d_head=a.d_head, framework="torch", max_logit=True, val_loss=True, overwrite=True,
                 program="examples/torch_log", **settings)
    with open(name + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["global_step", "train/loss", "val/loss"] +
                   ["attn_entropy/layer%d/head%d" % (l, h) for l in range(a.layers) for h in range(a.heads)])
        for step in range(a.steps + 1):
            s = torch.randint(0, len(train) - T - 1, (a.batch,), generator=gen)
            x = torch.stack([train[i:i + T] for i in s])
            y = torch.stack([train[i + 1:i + T + 1] for i in s])
            last = step == a.steps
            loss, keep = model(x, y)
            if step % a.log_every == 0 or last:
                with torch.no_grad():
                    vx = torch.stack([val[i:i + T] for i in vstarts])
                    vy = torch.stack([val[i + 1:i + T + 1] for i in vstarts])
                    vl = model(vx, vy)[0].item()
                weights = [wt for wt, _ in keep]
                log.row(step, loss.item(), attn=weights, max_logit=[float(logits.amax()) for _, logits in keep], val_loss=vl)
                w.writerow([step, "%.6f" % loss.item(), "%.6f" % vl] +
                           ["%.6f" % e for wt in weights for e in head_entropy(wt)])
                f.flush()
            if last:
                break
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    log.close()
    print("%s: loss %.4f, val %.4f" % (name, loss.item(), vl))


if __name__ == "__main__":
    main()
