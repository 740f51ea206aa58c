"""A recurrent encoder-decoder with attention (Bahdanau et al. 2015; Luong et al. 2015).

Encoder: embeddings -> (bi)GRU/LSTM over packed sequences (padding never enters the recurrence).
A bridge maps the encoder's final states to the decoder's initial states. Decoder, at each step t:

    h_t   = RNN(h_{t-1}, [embed(y_{t-1}); a_{t-1} if input feeding])
    c_t   = attention(h_t, encoder outputs)          (config group ``attention``)
    a_t   = tanh(W [h_t; c_t])                        the attentional vector
    p_t   = softmax(W_out a_t)

Teacher forcing: with ratio 1 every input is the reference token; below 1 each input is, per
sentence and step, the model's own previous prediction with probability 1 - ratio. The ratio can decay
linearly during training (``teacher_forcing_final``, ``teacher_forcing_decay_steps``).
"""

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.models.state import DecoderState
from nmt.modules.attention import attention_entropy
from nmt.modules.dropout import Dropout
from nmt.modules.rnn_attention import RNNAttention

CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}


class RNNSeq2Seq(nn.Module):
    """Attention RNN with the incremental interface of every nmt model (``encode``, ``decode_step``)."""

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int,
        attention: Callable[[int], RNNAttention],
        cell: str = "gru",
        embed_dim: int = 256,
        hidden_size: int = 512,
        encoder_layers: int = 2,
        decoder_layers: int = 2,
        bidirectional: bool = True,
        dropout: float = 0.3,
        input_feeding: bool = True,
        tie_embeddings: str = "none",
        teacher_forcing: float = 1.0,
        teacher_forcing_final: float | None = None,
        teacher_forcing_decay_steps: int = 0,
    ) -> None:
        super().__init__()
        if cell not in CELLS:
            raise ValueError(f"model.cell={cell!r} is not one of {sorted(CELLS)}")
        if tie_embeddings not in ("none", "decoder"):
            raise ValueError(f"model.tie_embeddings={tie_embeddings!r} is not one of ['none', 'decoder'] for the RNN")
        for key, value in (("teacher_forcing", teacher_forcing), ("teacher_forcing_final", teacher_forcing_final)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"model.{key}={value} must be in [0, 1]")
        if tie_embeddings == "decoder" and embed_dim != hidden_size:
            raise ValueError(
                f"model.tie_embeddings='decoder' needs model.embed_dim == model.hidden_size (got {embed_dim} and "
                f"{hidden_size}): the output layer reads the {hidden_size}-dimensional attentional vector"
            )
        self.pad_id = pad_id
        self.cell = cell
        self.hidden_size = hidden_size
        self.decoder_layers = decoder_layers
        self.input_feeding = input_feeding
        self.teacher_forcing = teacher_forcing
        self.teacher_forcing_final = teacher_forcing if teacher_forcing_final is None else teacher_forcing_final
        self.teacher_forcing_decay_steps = teacher_forcing_decay_steps
        self.register_buffer("train_steps", torch.zeros((), dtype=torch.long))  # for the decay schedule

        rnn = CELLS[cell]
        directions = 2 if bidirectional else 1
        self.src_embed = nn.Embedding(src_vocab_size, embed_dim, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, embed_dim, padding_idx=pad_id)
        self.dropout = Dropout(dropout)
        self.encoder = rnn(embed_dim, hidden_size, encoder_layers, batch_first=True, bidirectional=bidirectional,
                           dropout=dropout if encoder_layers > 1 else 0.0)  # fmt: skip
        self.memory_proj = nn.Linear(directions * hidden_size, hidden_size, bias=False)
        # the bridge: final encoder states (both directions) -> initial decoder states
        self.bridge = nn.Linear(directions * hidden_size, hidden_size)
        self.decoder = rnn(embed_dim + (hidden_size if input_feeding else 0), hidden_size, decoder_layers,
                           batch_first=True, dropout=dropout if decoder_layers > 1 else 0.0)  # fmt: skip
        self.attention = attention(hidden_size)
        self.combine = nn.Linear(2 * hidden_size, hidden_size, bias=False)
        self.output = nn.Linear(hidden_size, tgt_vocab_size, bias=False)
        if tie_embeddings == "decoder":
            self.output.weight = self.tgt_embed.weight
        for embed in (self.src_embed, self.tgt_embed):
            nn.init.normal_(embed.weight, std=embed_dim**-0.5)
            nn.init.zeros_(embed.weight[pad_id])

    # ---- encoder -------------------------------------------------------------------------------
    def _encode(self, src: torch.Tensor):
        """src: (batch, src_len) -> memory (batch, src_len, hidden), src_mask (batch, src_len), initial
        decoder states (batch, layers, hidden) (a tuple (h, c) for LSTM)."""
        src_mask = src != self.pad_id
        lengths = src_mask.sum(dim=1).clamp(min=1).cpu()
        packed = pack_padded_sequence(self.dropout(self.src_embed(src)), lengths, batch_first=True,
                                      enforce_sorted=False)  # fmt: skip
        outputs, final = self.encoder(packed)
        outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src.size(1))
        memory = self.memory_proj(outputs)  # (batch, src_len, hidden)
        if self.cell == "lstm":
            return memory, src_mask, (self._bridge(final[0]), self._bridge(final[1]))
        return memory, src_mask, self._bridge(final)

    def _bridge(self, final: torch.Tensor) -> torch.Tensor:
        # final: (layers * directions, batch, hidden) -> (batch, decoder_layers, hidden)
        directions = 2 if self.encoder.bidirectional else 1
        layers = final.size(0) // directions
        per_layer = final.view(layers, directions, final.size(1), -1)  # (layers, dirs, batch, hidden)
        per_layer = torch.cat(per_layer.unbind(1), dim=-1)  # (layers, batch, dirs * hidden)
        # the top encoder layers start the decoder layers (the top one repeated if the decoder is deeper)
        index = [max(layers - self.decoder_layers + i, 0) if layers >= self.decoder_layers else min(i, layers - 1)
                 for i in range(self.decoder_layers)]  # fmt: skip
        return torch.tanh(self.bridge(per_layer[index])).transpose(0, 1).contiguous()

    # ---- one decoder pass over given inputs -----------------------------------------------------
    def _decode(self, inputs, hidden, feed, memory, keys, src_mask):
        """inputs: (batch, steps, embed). Returns attentional vectors (batch, steps, hidden), new hidden,
        attention weights (batch, steps, src_len). With input feeding, steps must be 1; the last
        attentional vector is the next feed. The output layer is applied by the caller, so that a
        teacher-forced pass projects all steps onto the vocabulary in one matrix product."""
        if self.input_feeding:
            inputs = torch.cat((inputs, feed[:, None, :]), dim=-1)
        rnn_hidden = tuple(h.transpose(0, 1).contiguous() for h in hidden) if self.cell == "lstm" else \
            hidden.transpose(0, 1).contiguous()  # fmt: skip
        outputs, rnn_hidden = self.decoder(inputs, rnn_hidden)  # outputs: (batch, steps, hidden)
        hidden = tuple(h.transpose(0, 1) for h in rnn_hidden) if self.cell == "lstm" else rnn_hidden.transpose(0, 1)
        context, weights = self.attention(outputs, keys, memory, src_mask)
        attentional = torch.tanh(self.combine(torch.cat((outputs, context), dim=-1)))  # (batch, steps, hidden)
        return attentional, hidden, weights

    def _logits(self, attentional: torch.Tensor) -> torch.Tensor:
        """(batch, steps, hidden) -> (batch, steps, vocab)"""
        return self.output(self.dropout(attentional))

    def set_update(self, step: int) -> None:
        """The training update the next forward pass belongs to (set by the training module before each
        batch): the decay's clock counts updates, not forward passes (micro-batches under accumulation)."""
        self.train_steps.fill_(step)

    def teacher_forcing_ratio(self) -> float:
        return float(self._training_ratio())

    def _training_ratio(self) -> float | torch.Tensor:
        """The ratio a training forward pass uses: a constant as a number, a decaying one as a 0-dim tensor
        read from the step buffer, so that a compiled model sees no new constant each update (it recompiled
        every update until the compiler gave up)."""
        if self.teacher_forcing_decay_steps <= 0:
            return self.teacher_forcing
        progress = (self.train_steps.float() / self.teacher_forcing_decay_steps).clamp(max=1.0)
        return self.teacher_forcing + progress * (self.teacher_forcing_final - self.teacher_forcing)

    def scheduled_values(self) -> dict[str, float]:
        """The values of the model's own schedule at this update, logged with the update's scalars: the
        teacher-forcing ratio a decaying run trains with (a constant one is in the run's config)."""
        return {"teacher_forcing": self.teacher_forcing_ratio()} if self.teacher_forcing_decay_steps > 0 else {}

    # ---- training ------------------------------------------------------------------------------
    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, return_attention: bool = False):
        """src: (batch, src_len), tgt_in: (batch, tgt_len) -> logits (batch, tgt_len, vocab)
        (and attention weights (batch, tgt_len, src_len) with ``return_attention``)."""
        memory, src_mask, hidden = self._encode(src)
        keys = self.attention.prepare_keys(memory)
        feed = memory.new_zeros(src.size(0), self.hidden_size)
        ratio = self._training_ratio() if self.training else 1.0
        # decided by the settings, not the ratio's value: a decaying ratio is a tensor that may reach 1
        forced = not isinstance(ratio, torch.Tensor) and ratio >= 1.0
        embedded = self.dropout(self.tgt_embed(tgt_in))  # (batch, tgt_len, embed)
        if forced and not self.input_feeding:
            # all inputs known and no step-to-step feed: one call of the recurrence over the sequence
            attentional, _, weights = self._decode(embedded, hidden, feed, memory, keys, src_mask)
            logits = self._logits(attentional)
            return (logits, weights) if return_attention else logits
        all_attentional, all_logits, all_weights = [], [], []
        previous_prediction = None
        for t in range(tgt_in.size(1)):
            step_input = embedded[:, t : t + 1]
            if not forced and previous_prediction is not None:
                use_model = torch.rand(src.size(0), device=src.device) >= ratio  # (batch,)
                own = self.dropout(self.tgt_embed(previous_prediction))[:, None]
                step_input = torch.where(use_model[:, None, None], own, step_input)
            attentional, hidden, weights = self._decode(step_input, hidden, feed, memory, keys, src_mask)
            feed = attentional[:, -1]
            all_attentional.append(attentional)
            all_weights.append(weights)
            if not forced:  # the model's own prediction may be the next input: project every step
                all_logits.append(self._logits(attentional))
                previous_prediction = all_logits[-1][:, -1].argmax(dim=-1).detach()
        if all_logits:
            logits = torch.cat(all_logits, dim=1)
        else:  # teacher forcing only: one product over all steps instead of one per step
            logits = self._logits(torch.cat(all_attentional, dim=1))
        return (logits, torch.cat(all_weights, dim=1)) if return_attention else logits

    # ---- inference -----------------------------------------------------------------------------
    def encode(self, src: torch.Tensor) -> DecoderState:
        memory, src_mask, hidden = self._encode(src)
        tensors = {"memory": memory, "keys": self.attention.prepare_keys(memory), "src_mask": src_mask,
                   "feed": memory.new_zeros(src.size(0), self.hidden_size)}  # fmt: skip
        if self.cell == "lstm":
            tensors["hidden"], tensors["cell"] = hidden
        else:
            tensors["hidden"] = hidden
        return DecoderState(tensors, step=0)

    def decode_step(self, prev_tokens: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, DecoderState]:
        """prev_tokens: (batch,) -> logits (batch, vocab)."""
        t = state.tensors
        hidden = (t["hidden"], t["cell"]) if self.cell == "lstm" else t["hidden"]
        embedded = self.dropout(self.tgt_embed(prev_tokens[:, None]))
        attentional, hidden, _ = self._decode(embedded, hidden, t["feed"], t["memory"], t["keys"], t["src_mask"])
        new = dict(t, feed=attentional[:, -1])
        if self.cell == "lstm":
            new["hidden"], new["cell"] = hidden
        else:
            new["hidden"] = hidden
        return self._logits(attentional)[:, -1], DecoderState(new, state.step + 1)

    def cross_attention_entropy(self, src: torch.Tensor, tgt_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """As the Transformer's: (1,) the entropy in nats of the decoder's attention over the source on a
        teacher-forced batch (mean over real target tokens), and that of attention spread evenly over each
        source. Pinned at the second, the decoder reads only the mean of the encoder's states."""
        with torch.no_grad():
            _, weights = self.forward(src, tgt_in, return_attention=True)  # (batch, tgt_len, src_len)
        queries = tgt_in != self.pad_id
        entropy = attention_entropy(weights[:, None], queries)
        source_lengths = (src != self.pad_id).sum(1).float()
        even = (source_lengths.log()[:, None] * queries).sum() / queries.sum()
        return entropy[None], even

    @torch.no_grad()
    def attention_maps(self, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[str, torch.Tensor]:
        """Teacher-forced attention: {"attention": (batch, 1, tgt_len, src_len)}."""
        _, weights = self.forward(src, tgt_in, return_attention=True)
        return {"attention": weights[:, None]}
