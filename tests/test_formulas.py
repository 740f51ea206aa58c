"""Values checked against their definitions, computed independently here (loops over the formula):
sinusoid table, Luong and Bahdanau attention scores, the label-smoothed loss, the learning-rate
schedules, checkpoint averaging and the sampling filters."""

import math

import pytest
import torch

import nmt.modules.loss
from nmt.inference.checkpoint import average_state_dicts
from nmt.modules.loss import CPU_BLOCK_VALUES as BLOCK_VALUES
from nmt.modules.loss import BlockedSmoothedCrossEntropy, LabelSmoothedCrossEntropy, smoothed_cross_entropy_sums
from nmt.modules.position import sinusoid_table
from nmt.modules.rnn_attention import AdditiveAttention, DotAttention, MultiplicativeAttention
from nmt.training.optim import noam, warmup_decay


def test_sinusoid_table_is_vaswanis_formula():
    dim = 6
    table = sinusoid_table(torch.arange(5), dim)
    for pos in range(5):
        for i in range(dim // 2):
            angle = pos / 10000 ** (2 * i / dim)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("cls", [DotAttention, MultiplicativeAttention, AdditiveAttention])
def test_rnn_attention_scores_follow_their_formulas(cls):
    torch.manual_seed(0)
    dim, src_len = 4, 3
    attention = cls(dim)
    q = torch.randn(1, 1, dim)
    memory = torch.randn(1, src_len, dim)
    mask = torch.tensor([[True, True, False]])
    context, weights = attention(q, attention.prepare_keys(memory), memory, mask)
    scores = []
    with torch.no_grad():  # plain numbers: the reference needs no graph
        for j in range(src_len):
            h, s = memory[0, j], q[0, 0]
            if cls is DotAttention:  # Luong "dot", scaled: s . h / sqrt(d)
                scores.append(float(s @ h) / math.sqrt(dim))
            elif cls is MultiplicativeAttention:  # Luong "general": s^T W h
                scores.append(float(s @ (attention.weight.weight @ h)))
            else:  # Bahdanau: v^T tanh(W_q s + W_k h + b)
                hidden = attention.query_proj.weight @ s + attention.key_proj.weight @ h + attention.key_proj.bias
                scores.append(float(attention.v.weight[0] @ torch.tanh(hidden)))
    e = [math.exp(x) for x in scores[:2]]  # the masked position gets no weight
    expected = [e[0] / sum(e), e[1] / sum(e), 0.0]
    assert weights[0, 0].tolist() == pytest.approx(expected, abs=1e-6)
    torch.testing.assert_close(context[0, 0], expected[0] * memory[0, 0] + expected[1] * memory[0, 1])


def test_label_smoothed_loss_by_hand():
    logits = torch.tensor([[[2.0, 0.5, -1.0, 0.0], [0.0, 0.0, 3.0, 1.0], [1.0, 1.0, 1.0, 1.0]]])
    target = torch.tensor([[1, 2, 0]])  # the last position is padding (pad_id 0)
    eps, vocab = 0.1, 4
    loss, nll, tokens = LabelSmoothedCrossEntropy(smoothing=eps, pad_id=0)(logits, target)
    total, total_nll = 0.0, 0.0
    for t in range(2):
        row = logits[0, t].tolist()
        log_z = math.log(sum(math.exp(x) for x in row))
        logp = [x - log_z for x in row]
        gold = target[0, t].item()
        # target distribution: (1 - eps) on the reference plus eps / V on every token (PyTorch's convention)
        total += -sum(((1 - eps) * (k == gold) + eps / vocab) * logp[k] for k in range(vocab))
        total_nll += -logp[gold]
    assert tokens.item() == 2
    assert loss.item() == pytest.approx(total / 2, rel=1e-6)
    assert nll.item() == pytest.approx(total_nll, rel=1e-6)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_blocked_cpu_loss_has_the_exact_gradient(smoothing, monkeypatch):
    """Its hand-written backward pass against the numerical gradient, in fp64, over several blocks (blocks
    of 2 rows here: 5 rows make 3 blocks, the last one short), with padded rows."""
    monkeypatch.setattr(nmt.modules.loss, "CPU_BLOCK_VALUES", 14)
    logits = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([3, 0, 6, 2, 0])  # pad_id 0 at rows 1 and 4

    def weighted_loss(x):  # distinct weights per row check that each row gets its own upstream gradient
        loss, _ = BlockedSmoothedCrossEntropy.apply(x, target, smoothing, 0)
        return loss * torch.arange(1.0, 6.0, dtype=torch.float64)

    assert torch.autograd.gradcheck(weighted_loss, (logits,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_blocked_cpu_loss_equals_the_formula(dtype):
    """The CPU path (blocks of rows) and the GPU path (one log-softmax) give the same loss, NLL and
    gradient, with the gradient in the logits' dtype."""
    torch.manual_seed(0)
    base = torch.randn(2, 40, BLOCK_VALUES // 16) * 3  # 80 rows in blocks of 16
    target = torch.randint(1, base.size(-1), (2, 40))
    target[:, 30:] = 0  # padding
    blocked, formula = base.to(dtype).requires_grad_(), base.to(dtype).requires_grad_()
    loss, nll, tokens = LabelSmoothedCrossEntropy(smoothing=0.1, pad_id=0)(blocked, target)
    loss_sum, nll_sum = smoothed_cross_entropy_sums(formula.reshape(-1, base.size(-1)), target.reshape(-1), 0.1, 0)
    (loss_sum / 60).backward()
    loss.backward()
    assert tokens.item() == 60
    torch.testing.assert_close(loss, loss_sum / 60)
    torch.testing.assert_close(nll, nll_sum.detach())
    assert blocked.grad.dtype == dtype
    torch.testing.assert_close(blocked.grad, formula.grad)


def _rates(make, steps):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = make(optimizer)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_noam_schedule_values():
    rates = _rates(lambda o: noam(o, total_steps=100, d_model=64, warmup=10, factor=2.0), 30)
    for step, rate in enumerate(rates):
        s = max(step, 1)
        assert rate == pytest.approx(2.0 * 64**-0.5 * min(s**-0.5, s * 10**-1.5))
    assert max(rates) == pytest.approx(2.0 * 64**-0.5 * 10**-0.5)  # the peak, at the end of warm-up


@pytest.mark.parametrize("decay", ["inverse_sqrt", "cosine", "linear", "constant"])
def test_warmup_decay_values(decay):
    warmup, total, min_ratio = 4, 20, 0.1
    rates = _rates(lambda o: warmup_decay(o, total, warmup=warmup, decay=decay, min_ratio=min_ratio), total + 1)
    for step, rate in enumerate(rates):
        if step < warmup:
            expected = (step + 1) / warmup
        elif decay == "inverse_sqrt":
            expected = math.sqrt(warmup / step)
        elif decay == "constant":
            expected = 1.0
        else:
            progress = (step - warmup) / (total - warmup)
            shape = 0.5 * (1 + math.cos(math.pi * progress)) if decay == "cosine" else 1 - progress
            expected = min_ratio + (1 - min_ratio) * shape
        assert rate == pytest.approx(expected), step
    if decay in ("cosine", "linear"):
        assert rates[total] == pytest.approx(min_ratio)


def test_checkpoint_average_is_the_mean():
    dicts = [
        {"w": torch.tensor([1.0, 2.0]), "step": torch.tensor(3)},
        {"w": torch.tensor([3.0, 7.0]), "step": torch.tensor(5)},
    ]
    dicts.append({"w": torch.tensor([2.0, -3.0]), "step": torch.tensor(9)})
    averaged = average_state_dicts(dicts)
    torch.testing.assert_close(averaged["w"], torch.tensor([2.0, 2.0]))
    assert averaged["step"].item() == 3  # integer buffers are taken from the first, not averaged
    # another model's checkpoint among them (other names, other shapes): named, not a KeyError
    from nmt.inference.checkpoint import CheckpointError

    names = ["epoch003.ckpt", "epoch004.ckpt", "epoch005.ckpt"]
    with pytest.raises(
        CheckpointError, match=r"^epoch005.ckpt holds other weights than epoch003.ckpt \(v \.\.\.\): ch"
    ):
        average_state_dicts([*dicts[:2], {"v": torch.tensor([1.0]), "step": torch.tensor(1)}], names)
    with pytest.raises(CheckpointError, match=r"^epoch004.ckpt holds other weights than epoch003.ckpt \(w\)"):
        average_state_dicts([dicts[0], {"w": torch.zeros(3), "step": torch.tensor(1)}], names[:2])


@pytest.mark.parametrize("use_values", [True, False])
def test_shaw_relative_attention_matches_a_loop_over_the_papers_formula(use_values):
    """Shaw et al. 2018, eqs. 3-5: e_ij = q_i . (k_j + a^K_ij) / sqrt(d), z_i = sum_j a_ij (v_j + a^V_ij),
    a_ij = table[clip(j - i, -k, k)]. Length 6 with clip 2, so clipping and the sign of j - i both matter."""
    from nmt.modules.attention import MultiHeadAttention
    from nmt.modules.position import RelativePosition

    torch.manual_seed(0)
    d_model, heads, length, clip = 8, 2, 6, 2
    hd = d_model // heads
    position = RelativePosition(d_model, hd, clip=clip, use_values=use_values)
    attention = MultiHeadAttention(d_model, heads, position=position, fused=True).eval()
    x = torch.randn(1, length, d_model)
    pos = torch.arange(length)
    causal = torch.ones(length, length, dtype=torch.bool).tril()[None, None]
    with torch.no_grad():
        k, v = attention.project_kv(x, pos)
        out = attention(x, k, v, causal, pos, pos)
        q_all = attention.q_proj(x)[0].view(length, heads, hd)
        k_all = attention.k_proj(x)[0].view(length, heads, hd)
        v_all = attention.v_proj(x)[0].view(length, heads, hd)
        z = torch.zeros(length, heads, hd)

        def table(t, i, j):  # a_ij: the vector of the clipped distance j - i
            return t.weight[max(-clip, min(clip, j - i)) + clip]

        for h in range(heads):
            for i in range(length):
                js = range(i + 1)  # causal
                e = [float(q_all[i, h] @ (k_all[j, h] + table(position.keys, i, j))) / math.sqrt(hd) for j in js]
                w = torch.tensor(e).softmax(0)
                for j, a in zip(js, w, strict=True):
                    value = v_all[j, h] + (table(position.vals, i, j) if use_values else 0)
                    z[i, h] += a * value
        expected = attention.out_proj(z.reshape(length, d_model))
    torch.testing.assert_close(out[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.5, 0, 1.0), (2.0, 0, 1.0), (1.0, 2, 1.0), (1.0, 0, 0.7)]
)
def test_sampling_follows_temperature_top_k_and_top_p_definitions(temperature, top_k, top_p):
    from nmt.decoding.search import _sample
    from nmt.decoding.settings import SearchConfig

    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    # the definition: p_i proportional to exp(l_i / T); top-k keeps the k largest; top-p keeps the
    # smallest set of most likely tokens whose probability reaches p; then renormalise
    p = [math.exp(x / temperature) for x in logits.tolist()]
    p = [x / sum(p) for x in p]
    keep = sorted(range(4), key=lambda i: -p[i])
    if top_k:
        keep = keep[:top_k]
    if top_p < 1.0:
        mass, kept = 0.0, []
        for i in keep:
            kept.append(i)
            mass += p[i]
            if mass >= top_p:
                break
        keep = kept
    expected = [p[i] / sum(p[j] for j in keep) if i in keep else 0.0 for i in range(4)]
    cfg = SearchConfig(strategy="sample", temperature=temperature, top_k=top_k, top_p=top_p)
    assert_draws_follow(_sample, logits, cfg, expected)


def assert_draws_follow(sample, logits, cfg, expected, n: int = 40_000) -> None:
    """``n`` draws of ``sample`` from one row of ``logits`` are as frequent as ``expected`` says (within 4
    standard errors), and a token it gives probability 0 is never drawn."""
    draws = sample(logits.repeat(n, 1), cfg, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=len(expected)).float() / n
    for i, want in enumerate(expected):
        if want == 0.0:
            assert freq[i] == 0  # filtered tokens are never drawn
        else:
            assert freq[i].item() == pytest.approx(want, abs=4 * math.sqrt(want / n) + 1e-3)


@pytest.mark.parametrize(
    ("probs", "epsilon", "temperature"),
    [
        ([0.6, 0.3, 0.06, 0.04], 0.05, 1.0),  # the last dropped: 0.6, 0.3 and 0.06 over 0.96
        ([0.6, 0.3, 0.06, 0.04], 0.12, 1.0),  # the last two dropped
        ([0.6, 0.3, 0.06, 0.04], 0.12, 2.0),  # at temperature 2 the third reaches 0.12 (0.139), the last not
        ([0.3, 0.25, 0.25, 0.2], 0.5, 1.0),  # every token below: the most probable alone
    ],
)
def test_epsilon_sampling_follows_its_definition(probs, epsilon, temperature):
    """Hewitt et al. 2022: every token whose probability (at the temperature) is below epsilon is dropped,
    the rest renormalised; where none is left, the most probable token alone."""
    from nmt.decoding.search import _sample
    from nmt.decoding.settings import SearchConfig

    p = [x ** (1 / temperature) for x in probs]
    p = [x / sum(p) for x in p]
    keep = [i for i in range(4) if p[i] >= epsilon] or [max(range(4), key=lambda i: p[i])]
    expected = [p[i] / sum(p[j] for j in keep) if i in keep else 0.0 for i in range(4)]
    cfg = SearchConfig(strategy="epsilon", epsilon=epsilon, temperature=temperature)
    assert_draws_follow(_sample, torch.tensor([math.log(x) for x in probs]), cfg, expected)


def test_rope_rotates_each_channel_pair_by_position_times_frequency():
    """Su et al. 2021: channel pair i (here channels i and i + d/2) of the vector at position m is rotated
    by the angle m * base^(-2i/d); written out per pair, and the score then depends on m - n only."""
    from nmt.modules.position import RotaryPosition

    torch.manual_seed(0)
    d = 8
    rope = RotaryPosition(d_model=16, head_dim=d)
    x = torch.randn(1, 1, 5, d)
    positions = torch.tensor([0, 1, 4, 9, 30])
    rotated = rope.rotate(x, positions)
    for row, m in enumerate(positions.tolist()):
        for i in range(d // 2):
            angle = m * 10000 ** (-2 * i / d)
            a, b = x[0, 0, row, i].item(), x[0, 0, row, i + d // 2].item()
            assert rotated[0, 0, row, i].item() == pytest.approx(a * math.cos(angle) - b * math.sin(angle), abs=1e-5)
            assert rotated[0, 0, row, i + d // 2].item() == pytest.approx(
                a * math.sin(angle) + b * math.cos(angle), abs=1e-5
            )
    q, k = torch.randn(1, 1, 1, d), torch.randn(1, 1, 1, d)

    def score(m, n):
        return float((rope.rotate(q, torch.tensor([m])) * rope.rotate(k, torch.tensor([n]))).sum())

    assert score(7, 3) == pytest.approx(score(14, 10), abs=1e-4)
    assert score(7, 3) != pytest.approx(score(3, 7), abs=1e-3)  # the sign of the distance matters


@pytest.mark.parametrize("decay", ["cosine", "linear"])
def test_the_decay_stays_at_its_floor_past_the_planned_steps(decay):
    # a run that trains past total_steps (max_steps raised on resume) stays at min_ratio * lr: cosine must not
    # rise again (cos(2 pi) = 1 at twice the decay's length), linear must not go below the floor
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    rate = warmup_decay(optimizer, total_steps=20, warmup=4, decay=decay, min_ratio=0.1).lr_lambdas[0]
    for step in (20, 25, 36, 100):
        assert rate(step) == pytest.approx(0.1), step
