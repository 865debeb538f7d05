"""RWKV-7 ("Goose"), the reference: BlinkDL's model from its state dict, in
float64, token by token (docs/attention-math.md §15, the gated recurrence family).

The math is the `rwkv` package's RWKV_x070 (its CPU path, plain PyTorch): per
layer a time mix and a channel mix, each after a LayerNorm and with a token shift.
Time mix of x (C) with the previous position's x_p, per head h of N channels:

    xx = x_p − x;  x_• = x + xx ⊙ μ_•        for r, w, k, v, a, g (att.x_r, ...)
    r = x_r R,  k = x_k K,  v = x_v V        (receptance, key, value: C → C)
    w = exp(−e^{−0.5} σ(w0 + tanh(x_w W1) W2))       (decay, per channel)
    a = σ(a0 + (x_a A1) A2)                            (in-context rate)
    g = σ(x_g G1) G2                                   (gate)
    κ̂ = normalize(k ⊙ k_k) per head;  k ← k ⊙ (1 + (a − 1) ⊙ k_a)
    v ← v + (v_first − v) ⊙ σ(v0 + (x_v V1) V2)       (layers after the first;
                                                        v_first: layer 0's v)
    S_h ← S_h diag(w_h) + (S_h (−κ̂_h)) (κ̂_h ⊙ a_h)ᵀ + v_h k_hᵀ,   y_h = S_h r_h
    y = GroupNorm_H(y; ln_x, eps 64e-5) + ((Σ_N r ⊙ k ⊙ r_k) per head) v
    out = (y ⊙ g) O

Channel mix: k = relu((x + (x_p − x) ⊙ μ_k) K)², out = k V. The model:
x = LN(emb[t]; blocks.0.ln0), then x += tmix(LN1 x), x += cmix(LN2 x) per layer,
logits = LN(x; ln_out) head. The state per layer is the two shifts (C each) and
S (H, N, N), S_h[i][j] with i over values and j over keys.
"""
import torch
import torch.nn.functional as F

DECAY_SCALE = 0.606531  # e^{-0.5}, as the rwkv package writes it
GROUP_NORM_EPS = 64e-5


def wkv_step(s, r, w, k, v, kk, a):
    """One position of the state update per head (H heads of N): s (H, N, N), s[h][i][j] with
    i over values and j over keys; r, w, k, v, kk (κ̂), a (α): (H·N,). Returns (y (H·N,), s).
        S_h ← S_h diag(w_h) + (S_h (−κ̂_h)) (κ̂_h ⊙ α_h)ᵀ + v_h k_hᵀ,   y_h = S_h r_h"""
    h, n = s.shape[0], s.shape[1]
    sa = torch.einsum("hij,hj->hi", s, (-kk).view(h, n))
    s = (s * w.view(h, 1, n) + sa.view(h, n, 1) * (kk * a).view(h, 1, n)
         + v.view(h, n, 1) * k.view(h, 1, n))
    return torch.einsum("hij,hj->hi", s, r.view(h, n)).reshape(-1), s


class Rwkv7:
    """A BlinkDL RWKV-7 state dict (the .pth names: emb.weight, blocks.N.att.*,
    blocks.N.ffn.*, ln_out.*, head.weight) as a float64 model."""

    def __init__(self, state_dict):
        z = {k: v.detach().to(torch.float64) for k, v in state_dict.items()}
        self.n_head, self.head_size = z["blocks.0.att.r_k"].shape
        self.vocab_size, self.n_embd = z["emb.weight"].shape
        self.n_layer = 1 + max(int(k.split(".")[1]) for k in z if k.startswith("blocks."))
        self.z = {k: (v.reshape(-1) if v.dim() == 3 else v) for k, v in z.items()}  # (1,1,C) → (C)

    def zero_state(self):
        c, h, n = self.n_embd, self.n_head, self.head_size
        return [(torch.zeros(c, dtype=torch.float64), torch.zeros(h, n, n, dtype=torch.float64),
                 torch.zeros(c, dtype=torch.float64)) for _ in range(self.n_layer)]

    def _time_mix(self, i, x, x_prev, v_first, s):
        z, h, n = self.z, self.n_head, self.head_size
        p = f"blocks.{i}.att."
        xx = x_prev - x
        xr, xw, xk, xv, xa, xg = (x + xx * z[p + m] for m in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"))
        r = z[p + "receptance.weight"] @ xr
        k = z[p + "key.weight"] @ xk
        v = z[p + "value.weight"] @ xv
        w = torch.exp(-DECAY_SCALE * torch.sigmoid(z[p + "w0"] + torch.tanh(xw @ z[p + "w1"]) @ z[p + "w2"]))
        a = torch.sigmoid(z[p + "a0"] + (xa @ z[p + "a1"]) @ z[p + "a2"])
        g = torch.sigmoid(xg @ z[p + "g1"]) @ z[p + "g2"]
        kk = F.normalize((k * z[p + "k_k"]).view(h, n), dim=-1, p=2.0).view(-1)
        k = k * (1 + (a - 1) * z[p + "k_a"])
        if i == 0:
            v_first = v
        else:
            v = v + (v_first - v) * torch.sigmoid(z[p + "v0"] + (xv @ z[p + "v1"]) @ z[p + "v2"])
        y, s = wkv_step(s, r, w, k, v, kk, a)
        y = F.group_norm(y.view(1, -1), h, z[p + "ln_x.weight"], z[p + "ln_x.bias"],
                         eps=GROUP_NORM_EPS).view(-1)
        y = y + ((r * k * z[p + "r_k"].reshape(-1)).view(h, n).sum(-1, keepdim=True)
                 * v.view(h, n)).view(-1)
        return z[p + "output.weight"] @ (y * g), s, v_first

    def _channel_mix(self, i, x, x_prev):
        z = self.z
        p = f"blocks.{i}.ffn."
        k = torch.relu(z[p + "key.weight"] @ (x + (x_prev - x) * z[p + "x_k"])) ** 2
        return z[p + "value.weight"] @ k

    def step(self, token, state):
        """Logits (V) for one token id and the state after it (a new list)."""
        z, c = self.z, self.n_embd
        x = F.layer_norm(z["emb.weight"][token], (c,), z["blocks.0.ln0.weight"], z["blocks.0.ln0.bias"])
        v_first, new_state = None, []
        for i, (shift_att, s, shift_ffn) in enumerate(state):
            b = f"blocks.{i}."
            xa = F.layer_norm(x, (c,), z[b + "ln1.weight"], z[b + "ln1.bias"])
            out, s, v_first = self._time_mix(i, xa, shift_att, v_first, s)
            x = x + out
            xf = F.layer_norm(x, (c,), z[b + "ln2.weight"], z[b + "ln2.bias"])
            x = x + self._channel_mix(i, xf, shift_ffn)
            new_state.append((xa, s, xf))
        x = F.layer_norm(x, (c,), z["ln_out.weight"], z["ln_out.bias"])
        return z["head.weight"] @ x, new_state

    def forward(self, tokens, state=None):
        """Logits (T, V) of a sequence of token ids, and the final state."""
        state = self.zero_state() if state is None else state
        out = []
        for t in tokens:
            logits, state = self.step(int(t), state)
            out.append(logits)
        return torch.stack(out), state


# The published models' (layers, C); head size 64, vocabulary 65,536, FFN 4C.
PUBLISHED_SHAPES = {"0.1B": (12, 768), "0.4B": (24, 1024), "1.5B": (24, 2048)}


def published_widths(c):
    """The low-rank widths (decay, in-context rate, value residual, gate) of RWKV-LM's
    trainer for width C: max(32, round(f / 32)·32) of 1.8√C, 1.8√C, 1.3√C, 0.6·C^0.8."""
    width = lambda f: max(32, int(round(f / 32)) * 32)  # noqa: E731
    return width(1.8 * c ** 0.5), width(1.8 * c ** 0.5), width(1.3 * c ** 0.5), width(0.6 * c ** 0.8)


def random_state_dict(layers, c, n, vocab, d_w, d_a, d_v, d_g, seed, d_ff=None):
    """BlinkDL's names and shapes (the .pth of RWKV-LM's RWKV-v7 trainer), with
    magnitudes like a trained model's: decays spread over (e^{-e^{-0.5}}, 1),
    token-shift mixes in (0, 1), low-rank paths that move their sigmoids. d_ff: the
    channel mix's width (default 4c). Float32 tensors; a published shape (0.1B and up)
    takes its size in float32 of memory."""
    d_ff = 4 * c if d_ff is None else d_ff
    g = torch.Generator().manual_seed(seed)
    u = lambda *shape, lo=-1.0, hi=1.0: lo + (hi - lo) * torch.rand(*shape, generator=g)
    nrm = lambda *shape, std=1.0: std * torch.randn(*shape, generator=g)
    h = c // n
    sd = {"emb.weight": nrm(vocab, c, std=0.5)}
    for i in range(layers):
        b, att, ffn = f"blocks.{i}.", f"blocks.{i}.att.", f"blocks.{i}.ffn."
        if i == 0:
            sd[b + "ln0.weight"], sd[b + "ln0.bias"] = u(c, lo=0.8, hi=1.2), u(c, lo=-0.1, hi=0.1)
        for ln in ("ln1", "ln2"):
            sd[b + ln + ".weight"], sd[b + ln + ".bias"] = u(c, lo=0.8, hi=1.2), u(c, lo=-0.1, hi=0.1)
        for m in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            sd[att + m] = u(1, 1, c, lo=0.0, hi=1.0)
        sd[att + "w0"] = u(1, 1, c, lo=-6.0, hi=1.0)
        sd[att + "w1"], sd[att + "w2"] = nrm(c, d_w, std=0.1), nrm(d_w, c, std=0.1)
        sd[att + "a0"] = u(1, 1, c, lo=-1.0, hi=1.0)
        sd[att + "a1"], sd[att + "a2"] = nrm(c, d_a, std=0.1), nrm(d_a, c, std=0.1)
        if i > 0:  # layer 0's v0, v1, v2 exist in the files but the package ignores them
            sd[att + "v0"] = u(1, 1, c, lo=-1.0, hi=1.0)
            sd[att + "v1"], sd[att + "v2"] = nrm(c, d_v, std=0.1), nrm(d_v, c, std=0.1)
        sd[att + "g1"], sd[att + "g2"] = nrm(c, d_g, std=0.1), nrm(d_g, c, std=0.1)
        sd[att + "k_k"] = u(1, 1, c, lo=0.7, hi=1.0)
        sd[att + "k_a"] = u(1, 1, c, lo=0.8, hi=1.2)
        sd[att + "r_k"] = nrm(h, n, std=0.3)
        for name in ("receptance", "key", "value", "output"):
            sd[att + name + ".weight"] = nrm(c, c, std=c ** -0.5)
        sd[att + "ln_x.weight"], sd[att + "ln_x.bias"] = u(c, lo=0.5, hi=1.5), u(c, lo=-0.1, hi=0.1)
        sd[ffn + "x_k"] = u(1, 1, c, lo=0.0, hi=1.0)
        sd[ffn + "key.weight"] = nrm(d_ff, c, std=c ** -0.5)
        sd[ffn + "value.weight"] = nrm(c, d_ff, std=d_ff ** -0.5)
    sd["ln_out.weight"], sd["ln_out.bias"] = u(c, lo=0.8, hi=1.2), u(c, lo=-0.1, hi=0.1)
    sd["head.weight"] = nrm(vocab, c, std=c ** -0.5)
    return sd


def favour_continuation(state_dict, tokens, first, boost=1.5):
    """A copy of the state dict whose head prefers tokens[t + 1] after tokens[:t + 1] for
    every t from first − 1 on, as a trained model prefers the text it learned: the head
    plus a correction ΔW (ridge, minimum norm) with ΔW f_t = b·e_{tokens[t+1]} on the
    reference's final features f_t (after ln_out), b = boost × the largest |logit| of the
    unchanged head over those positions. The other logits stay those of the random head,
    so the top logit stands clear of the rest by about (boost − 1) × the largest. Returns
    (state dict, the smallest gap between the top two logits over those positions, of
    the largest |logit|), the gap measured on the new model by the reference."""
    tokens = [int(t) for t in tokens]
    c = state_dict["emb.weight"].shape[1]
    probe = dict(state_dict)
    probe["head.weight"] = torch.eye(c)
    features, _ = Rwkv7(probe).forward(tokens[:-1])
    f = features[first - 1:]                                          # (R, C)
    head = state_dict["head.weight"].to(torch.float64)               # (V, C)
    b = boost * (f @ head.T).abs().max()
    y = torch.zeros(f.shape[0], head.shape[0], dtype=torch.float64)  # (R, V)
    y[torch.arange(f.shape[0]), torch.tensor(tokens[first:])] = b
    k = f @ f.T
    ridge = 1e-6 * k.diagonal().mean() * torch.eye(k.shape[0], dtype=torch.float64)
    delta = y.T @ torch.linalg.solve(k + ridge, f)                   # (V, C)
    out = dict(state_dict)
    out["head.weight"] = (head + delta).to(state_dict["head.weight"].dtype)
    logits, _ = Rwkv7(out).forward(tokens[:-1])
    top2 = logits[first - 1:].topk(2, dim=1).values
    return out, float((top2[:, 0] - top2[:, 1]).min() / logits[first - 1:].abs().max())
