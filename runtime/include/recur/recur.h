/* recur: transformers as RNNs on the CPU. The C API, the library's only ABI.
 *
 * Objects:
 *   recur_model    an immutable, loaded model. Thread-safe: any number of
 *                  sessions on any number of threads may share one.
 *   recur_session  B independent streams of one model, each with a fixed-size
 *                  recurrent state. Not thread-safe: use one session per
 *                  thread (or serialise calls yourself).
 *
 * Errors: every function that can fail returns a recur_status. On failure,
 * recur_last_error() returns a message naming the problem (for example
 * "layer 3: mixer.key.weight has shape [64,256], expected [256,256]"). The
 * library never aborts and never throws on bad input.
 *
 * Options structs start with `struct_size`; set it to sizeof(the struct) so
 * that later versions can append fields. Pass NULL for defaults, or start
 * from recur_load_options_default() / recur_session_options_default() and
 * set the fields you need by name.
 */
#ifndef RECUR_RECUR_H_
#define RECUR_RECUR_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RECUR_VERSION_MAJOR 0
#define RECUR_VERSION_MINOR 1
#define RECUR_VERSION_PATCH 0

/* The newest model format_version this runtime reads. */
#define RECUR_FORMAT_VERSION 5

/* Header-only helpers are inline, so that the struct_size they set is the
 * caller's sizeof (C89 compilers spell it __inline). */
#if defined(__cplusplus) || (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L)
#define RECUR_INLINE static inline
#else
#define RECUR_INLINE static __inline
#endif

typedef enum recur_status {
  RECUR_OK = 0,
  RECUR_INVALID_ARGUMENT = 1,   /* a bad argument: null pointer, size, range */
  RECUR_INVALID_MODEL = 2,      /* model bytes fail verification or validation */
  RECUR_UNSUPPORTED = 3,        /* valid, but not supported by this build */
  RECUR_IO_ERROR = 4,           /* a file could not be opened, mapped or read */
  RECUR_OUT_OF_MEMORY = 5,
  RECUR_OUT_OF_RANGE = 6,       /* token id, stream index, position past the limit */
  RECUR_INVALID_STATE = 7,      /* a state blob that does not fit this session */
  RECUR_INTERNAL = 8
} recur_status;

/* A static string naming the status ("RECUR_INVALID_MODEL"). Never NULL. */
const char* recur_status_string(recur_status status);

/* The message of the most recent failing call on the calling thread, or ""
 * if none failed. The pointer stays valid until the next failing call on the
 * same thread. Never NULL. */
const char* recur_last_error(void);

/* The library's version as "MAJOR.MINOR.PATCH". */
const char* recur_version_string(void);

/* ------------------------------------------------------------------ model */

typedef struct recur_model recur_model;

enum recur_load_flags {
  /* Skip the FlatBuffers Verifier (semantic checks still run). Only for model
   * bytes verified at build time, e.g. compiled into the application. */
  RECUR_LOAD_TRUSTED = 1u << 0,
  /* Read the file into memory instead of mapping it. */
  RECUR_LOAD_NO_MMAP = 1u << 1
};

typedef struct recur_load_options {
  size_t struct_size;  /* sizeof(recur_load_options) */
  uint32_t flags;      /* recur_load_flags */
} recur_load_options;

/* recur_load_options with struct_size = sizeof(recur_load_options) and every
 * other field at its default (zero: flags 0). Set the fields that differ by
 * name. Nothing to free; thread-safe; never fails. */
RECUR_INLINE recur_load_options recur_load_options_default(void) {
#ifdef __cplusplus
  recur_load_options options = {};
#else
  recur_load_options options = {0};
#endif
  options.struct_size = sizeof(recur_load_options);
  return options;
}

/* Loads a model file. By default the file is mapped read-only and weights are
 * used in place (no copy). The file must not change while it is mapped. The
 * default platform asks the OS for huge pages for the mapping (Linux
 * transparent huge pages, madvise; file pages read from then on may come in
 * 2 MiB pages) and, with RECUR_LOAD_NO_MMAP, for a copy of 2 MiB or more: a
 * step streams every weight, and small pages cost it a TLB miss per 4 KiB.
 * `options` may be NULL. On success *out owns the mapping; free it with
 * recur_model_free. Errors: RECUR_IO_ERROR, RECUR_INVALID_MODEL (with the
 * failing check in the message), RECUR_UNSUPPORTED (newer format version). */
recur_status recur_model_load_file(const char* path, const recur_load_options* options,
                                   recur_model** out);

/* Loads a model from caller memory. The bytes are NOT copied: they must stay
 * valid and unchanged until recur_model_free, and should be 64-byte aligned
 * (misaligned bytes are rejected with RECUR_INVALID_ARGUMENT, since weights
 * are read in place with aligned SIMD loads). */
recur_status recur_model_load_buffer(const void* data, size_t size,
                                     const recur_load_options* options, recur_model** out);

/* Releases the caller's handle. Sessions created from the model keep it
 * (and its mapping) alive: it is freed with the last of them, so the order
 * of recur_model_free and recur_session_free does not matter. NULL is a
 * no-op. */
void recur_model_free(recur_model* model);

typedef enum recur_input_kind {
  RECUR_INPUT_TOKENS = 0,   /* int32 token ids */
  RECUR_INPUT_FEATURES = 1  /* float frames */
} recur_input_kind;

typedef enum recur_output_kind {
  RECUR_OUTPUT_VALUES = 0,            /* logits, or the stream without a head (d_model, or
                                         2·d_model for concatenated reversible streams) */
  RECUR_OUTPUT_PROBABILITIES = 1,     /* softmax head */
  RECUR_OUTPUT_LOG_PROBABILITIES = 2  /* log-softmax head */
} recur_output_kind;

typedef struct recur_model_info {
  size_t struct_size;          /* sizeof(recur_model_info), set by the caller */
  recur_input_kind input_kind;
  uint32_t vocab_size;         /* tokens: ids are in [0, vocab_size) */
  uint32_t feature_width;      /* features: floats per frame */
  uint32_t d_model;
  uint32_t num_layers;
  uint32_t output_width;       /* floats per stream per step */
  uint32_t max_positions;      /* steps per stream, the fewest rows of the learned positions
                                  and the rotary tables; 0 = unbounded */
  uint64_t parameter_count;
  size_t state_bytes;          /* recurrent state per stream, in bytes, besides the part that
                                  grows with the sequence (state_bytes_per_position), with
                                  compensated sums (the default recur_state_sums) */
  recur_output_kind output_kind;
  uint64_t step_weight_bytes;  /* dense-layer weight bytes one step streams (with int8/int4 scales) */
  uint64_t step_flops;         /* dense-layer FLOPs of one step of one stream */
  size_t state_bytes_per_position; /* KV-cache bytes per position per stream (softmax
                                      attention); 0 when the state is fixed. A session
                                      holds state_bytes (or state_bytes_plain_sums) +
                                      this × its max_context per stream. */
  uint32_t max_context_bound;  /* the most positions a stream can hold because a mixer's
                                  parameters end there (AFT-full's or GAU's max_length);
                                  0 = no such bound */
  size_t state_bytes_plain_sums; /* state_bytes for a session with RECUR_STATE_SUMS_PLAIN:
                                    less by the compensations (equal when the model has no
                                    linear attention) */
  uint64_t step_integer_flops; /* the part of step_flops on int8 and int4 weight matrices:
                                  integer dot products where a session quantises the
                                  activations (recur_int8_activations), f32 FMAs where not */
  uint32_t recurrent;          /* 1: every block has a recurrent form, so step and prefill
                                  run; 0: some block is non-causal (an encoder), and the
                                  model runs whole sequences with recur_session_encode only */
} recur_model_info;

/* Fills *info. Set info->struct_size first. */
recur_status recur_model_get_info(const recur_model* model, recur_model_info* info);

/* ------------------------------------------------------------- vocabulary */

/* A model file may carry its vocabulary (recur-convert --tokenizer, a
 * config's "tokenizer", or a GGUF file's), so that text goes in and out
 * through the model alone. Encoding depends on the vocabulary's kind
 * (docs/model-format.md):
 *  - RWKV's greedy longest match over the text's bytes: at each position the
 *    longest token whose bytes are a prefix of the rest, as BlinkDL's
 *    TRIE_TOKENIZER (the rwkv package) and llama.cpp's "rwkv" tokenizer do;
 *    text naming a special token ("<s>") is encoded as the plain bytes it is.
 *  - Byte-level BPE (GPT-2, GPT-NeoX: Hugging Face tokenizers' encode(text).ids):
 *    added tokens ("<|endoftext|>") where the text holds them exactly, the
 *    rest split by the GPT-2 pattern and merged by rank. Any bytes encode; a
 *    byte that is not UTF-8 counts as punctuation.
 * Decoding concatenates the tokens' bytes (an added token's text included);
 * a token may hold part of a UTF-8 sequence (see recur_utf8_incomplete_tail).
 *
 * These functions read the immutable model only: any number of threads may
 * call them at once, on one model or many, beside sessions of it. They
 * allocate nothing, but for byte-level BPE encoding of a piece (a word, a
 * run of spaces) longer than 64 bytes: one buffer of O(its length) for the
 * call. A model without a vocabulary makes each of them return
 * RECUR_INVALID_ARGUMENT with a message saying so ("the model has no
 * vocabulary ..."); one whose vocabulary is of a kind this runtime does not
 * know (a newer file), RECUR_UNSUPPORTED. */

/* The vocabulary's token count (ids 0 to *token_count − 1; at most
 * recur_model_info.vocab_size, the embedding's rows) and the id of its
 * end-of-text token (-1: none; RWKV's World vocabulary: 0, which has no bytes
 * and which encoding never gives; GPT-NeoX's: 0, "<|endoftext|>", which
 * encoding gives where the text holds it). Either pointer may be NULL. */
recur_status recur_model_vocabulary(const recur_model* model, uint32_t* token_count,
                                    int32_t* end_of_text);

/* Encodes text[0, length) (bytes, UTF-8 or not; NULL with length 0 is the
 * empty text) into token ids. *count is set to the number of ids of the
 * whole encoding. With ids NULL and capacity 0 nothing else is written
 * (ask for the size first). Otherwise the first min(*count, capacity) ids go
 * to ids[], and a capacity below *count returns RECUR_OUT_OF_RANGE. Errors:
 * RECUR_INVALID_ARGUMENT (a null model or count, ids NULL with a capacity,
 * or a byte no token starts with, or for byte-level BPE no token is alone:
 * the message gives it and its offset; *count is then 0). */
recur_status recur_tokenize(const recur_model* model, const char* text, size_t length, int32_t* ids,
                            size_t capacity, size_t* count);

/* The bytes of token `id`: *bytes points into the model (valid until the
 * model is freed, not NUL-terminated) and *length is their count (0 for the
 * end-of-text token). Errors: RECUR_OUT_OF_RANGE for an id outside
 * [0, token_count). */
recur_status recur_token_bytes(const recur_model* model, int32_t id, const char** bytes,
                               size_t* length);

/* Decodes ids[0, n) into their bytes, one token's after another. *length is
 * set to the bytes of the whole decoding; with out NULL and capacity 0
 * nothing else is written. Otherwise the first min(*length, capacity) bytes
 * go to out[] (no NUL is added), and a capacity below *length returns
 * RECUR_OUT_OF_RANGE. Errors: RECUR_OUT_OF_RANGE also for an id outside
 * [0, token_count) (the message names its index; *length is then 0),
 * RECUR_INVALID_ARGUMENT for null pointers. */
recur_status recur_detokenize(const recur_model* model, const int32_t* ids, size_t n, char* out,
                              size_t capacity, size_t* length);

/* How many bytes at the end of bytes[0, length) start a UTF-8 sequence that
 * is not finished yet (0 to 3): a program printing tokens as they are
 * generated holds these back and prints them with the next token's bytes.
 * 0 when the end is complete, or is not UTF-8 at all (bytes that no later
 * byte can complete are not held back). Never fails; thread-safe. */
size_t recur_utf8_incomplete_tail(const char* bytes, size_t length);

/* --------------------------------------------------------------- sampling */

/* How recur_sample draws the next token from a step's logits. */
typedef struct recur_sampler_options {
  size_t struct_size; /* sizeof(recur_sampler_options) */
  float temperature;  /* the logits are divided by it before the softmax; 0 = greedy: the
                         highest logit (the default). Finite and >= 0. */
  uint32_t top_k;     /* keep only the top_k highest logits; 0 = all of them */
  float top_p;        /* nucleus: keep only the fewest highest logits whose probabilities add
                         up to at least top_p, in (0, 1]; 0 = 1 (keep all) */
  float min_p;        /* keep only the tokens whose probability is at least min_p times the
                         most likely token's, in [0, 1]; 0 = keep all (the default) */
} recur_sampler_options;

/* recur_sampler_options with struct_size = sizeof(recur_sampler_options) and
 * every other field at its default (zero: greedy). Nothing to free;
 * thread-safe; never fails. */
RECUR_INLINE recur_sampler_options recur_sampler_options_default(void) {
#ifdef __cplusplus
  recur_sampler_options options = {};
#else
  recur_sampler_options options = {0};
#endif
  options.struct_size = sizeof(recur_sampler_options);
  return options;
}

/* Draws a token id in [0, n) from logits[0, n) (a step's output of a model
 * without a softmax head; pass the log of probabilities). `options` may be
 * NULL (greedy). *rng_state is the state of the random generator,
 * splitmix64: set it to a seed before the first draw and pass it to every
 * draw after; each draw that is not greedy advances it by one step. So a
 * seed and the same logits give the same tokens on every platform (up to
 * the last bit of exp(): a draw within a rounding of a boundary between
 * two tokens may differ).
 *
 * The algorithm, in double precision:
 *  1. A logit that is NaN or +inf is an error; -inf is a token never drawn.
 *  2. temperature 0 or top_k 1 (greedy): the id of the highest logit, the
 *     lowest id on a tie. *rng_state is neither read nor advanced.
 *  3. Tokens are ranked by logit, highest first, the lower id first on a
 *     tie; top_k > 0 keeps the first top_k of them. Each kept token weighs
 *     w = exp((logit - max logit) / temperature); W is the kept weights'
 *     sum, added in id order.
 *  4. top_p < 1 keeps the shortest prefix of that ranking whose weights,
 *     added in rank order, reach top_p * W (at least one token), and W
 *     becomes their sum in id order.
 *  5. min_p > 0 keeps, of those, the tokens whose weight is at least min_p
 *     (the highest logit's weight is 1, so it stays), and W becomes their
 *     sum in id order. As Hugging Face's MinPLogitsWarper, after the
 *     temperature; llama.cpp's min-p sampler, which its default chain runs
 *     before the temperature, keeps the tokens this keeps at temperature 1.
 *  6. u = (splitmix64(rng_state) >> 11) * 2^-53, in [0, 1); the token drawn
 *     is the first kept token, in id order, at which the running sum of the
 *     kept weights exceeds u * W.
 *
 * Threading: any number of threads may call it at once, each with its own
 * *rng_state. Memory: keeps a scratch of 12 bytes per logit on the calling
 * thread, grown the first time a thread draws from more logits (nothing for
 * greedy draws). Errors: RECUR_INVALID_ARGUMENT (a null logits, rng_state or
 * token, n of 0 or past 2^31 - 1, options out of range or with a bad
 * struct_size, a NaN or +inf logit, every logit -inf: the message names
 * which); *token is then unchanged. */
recur_status recur_sample(const float* logits, size_t n, const recur_sampler_options* options,
                          uint64_t* rng_state, int32_t* token);

/* Penalties on tokens seen before, as recur_apply_penalties applies them
 * to a step's logits before recur_sample: llama.cpp's repeat, presence and
 * frequency penalties (over a window of recent tokens the caller keeps) and
 * RWKV's presence and frequency penalties with their decay (alpha_presence,
 * alpha_frequency, alpha_decay of the rwkv package's pipeline). Zero in a
 * field means its default, which changes nothing. */
typedef struct recur_penalty_options {
  size_t struct_size; /* sizeof(recur_penalty_options) */
  float repeat;       /* a seen token's logit is divided by it when positive and
                         multiplied by it otherwise; 0 = 1 (none). Finite and > 0. */
  float presence;     /* subtracted once from the logit of each seen token. Finite. */
  float frequency;    /* subtracted once per occurrence, each occurrence weighted
                         by decay^age. Finite. */
  float decay;        /* an occurrence's weight falls by this factor per newer token:
                         age 0 (the newest) weighs 1; 0 = 1 (no decay, every
                         occurrence weighs 1). In (0, 1]. */
} recur_penalty_options;

/* recur_penalty_options with struct_size = sizeof(recur_penalty_options) and
 * every other field at its default (zero: no penalty). Nothing to free;
 * thread-safe; never fails. */
RECUR_INLINE recur_penalty_options recur_penalty_options_default(void) {
#ifdef __cplusplus
  recur_penalty_options options = {};
#else
  recur_penalty_options options = {0};
#endif
  options.struct_size = sizeof(recur_penalty_options);
  return options;
}

/* Changes logits[0, n) in place for the tokens in recent[0, count) (ids,
 * oldest first: the tokens drawn so far, or the last few of them, or the
 * prompt's too, as the caller chooses; count 0 changes nothing). For each
 * distinct id t in `recent`, in double precision:
 *    c = the sum over t's occurrences of decay^age (age: how many tokens of
 *        `recent` come after that occurrence),
 *    x = logits[t]; x = x / repeat if x > 0, else x * repeat;
 *    logits[t] = x - (frequency * c + presence),
 * rounded to float. llama.cpp's penalties are decay 1 (c is the count) over
 * its last penalty_last_n tokens; the rwkv package's are repeat 1 over the
 * tokens it has generated. -inf stays -inf. `options` may be NULL (no
 * change).
 *
 * Threading: any number of threads may call it at once on different
 * logits. Memory: keeps a scratch of 16 bytes per recent token on the
 * calling thread. Errors: RECUR_INVALID_ARGUMENT (a null logits, or a null
 * recent with count > 0, n of 0 or past 2^31 - 1, an id outside [0, n),
 * options out of range or with a bad struct_size: the message names which);
 * the logits are then unchanged. */
recur_status recur_apply_penalties(float* logits, size_t n, const int32_t* recent, size_t count,
                                   const recur_penalty_options* options);

/* ---------------------------------------------------------------- session */

typedef struct recur_session recur_session;

/* Whether dense layers may keep a private, re-laid-out copy of their
 * weights: panels (the layout batched GEMMs run fastest on) of f32, 4 bytes
 * per weight, or for f16 and bf16 layers of their own values, 2 bytes (the
 * same results bit for bit), for int4 layers with groups of 32 row panels
 * (0.5625 bytes per weight) that steps of 1-4 streams run on where the CPU
 * is faster with them (x86-64 with AVX2 or later; docs/performance.md "int4
 * weights"), and for q4_k, q6_k and q8_0 layers that run on block-quantised
 * rows (GGUF's K-quants and Q8_0) the tiles of their integer GEMM (AVX-512
 * with VNNI; the layer's bytes for q4_k, 1.31× for q6_k, 1.06× for q8_0;
 * docs/performance.md "GEMM backends"). highway's and
 * onednn's copies of 2 MiB or more are laid out in huge pages where the OS
 * gives them (as the model's mapping, recur_model_load_file); xnnpack's are
 * its own allocator's. */
typedef enum recur_weight_packing {
  /* Panels when batch >= 4, where every step is a GEMM: f16 and bf16 layers
   * in panels of their own values when the model's dense weights pass 8 MiB
   * and the CPU widens f16 in one instruction (x86-64 from AVX2, arm64), as
   * their steps then read the panels from memory and half the bytes is
   * faster (docs/performance.md "Packed weights"); f32 otherwise. Sessions
   * of 1-3 streams keep reading the model's bytes in place (zero-copy), and
   * their prefills use the unpacked kernels (~10-20% slower GEMMs). int4 row
   * panels for sessions of 1-4 streams whose int4 layers run on integer dot
   * products (int8_activations AUTO or QUANTIZED), on CPUs where they are
   * faster. Block-quantised tiles when batch >= 4, for the calls their GEMM
   * takes (steps of 8 or more streams, prefill chunks), and of q4_k layers
   * in sessions of one stream, whose steps read them as one stream. */
  RECUR_PACKING_AUTO = 0,
  /* Never copy weights: sessions use only the model's bytes; the automatic
   * backend choice skips backends that copy weights (xnnpack, onednn). */
  RECUR_PACKING_OFF = 1,
  /* Always pack: f32 panels for the calls that run on f32 (the fastest
   * GEMMs of many rows, prefill and encode, for any batch; f16 and bf16
   * layers too, at twice their bytes), block-quantised tiles for those that
   * run on block-quantised rows (batches of 8 or more of q4_k, q6_k and q8_0
   * on AVX-512 with VNNI); int4 row panels as AUTO. */
  RECUR_PACKING_ON = 2
} recur_weight_packing;

/* How a session keeps linear attention's running sums S = Σ φ(k)vᵀ and
 * z = Σ φ(k) (recur_session_options.state_sums). */
typedef enum recur_state_sums {
  /* Kahan-compensated: float32 accuracy after millions of steps, as after a
   * few (docs/reliability.md "Long runs"). The default. */
  RECUR_STATE_SUMS_COMPENSATED = 0,
  /* Plain float sums: half of linear attention's state (so less memory and
   * memory traffic per step: faster at large batch), with rounding error
   * that grows with the sequence (docs/reliability.md "Long runs" measures both). For
   * sequences of thousands of steps, e.g. 784-pixel images. */
  RECUR_STATE_SUMS_PLAIN = 1
} recur_state_sums;

/* How the highway backend runs dense layers with int8, int4 and the other
 * quantised weights (recur_session_options.int8_activations); int4 layers
 * follow the same rules, with integer sums per group of inputs. */
typedef enum recur_int8_activations {
  /* RECUR_INT8_ACTIVATIONS_QUANTIZED where this CPU's SIMD target has
   * integer dot products (x86 SSSE3 and later, arm64 NEON) and the layer
   * takes them (16 <= inputs <= 16384), else FLOAT. q4_k, q6_k and q8_0
   * layers run as BLOCKS for one row at a time (a step of one stream) on x86
   * from AVX2 and for 8 rows or more on x86 with AVX-512 VNNI, where that is
   * faster, else FLOAT; q5_k FLOAT. The default. */
  RECUR_INT8_ACTIVATIONS_AUTO = 0,
  /* Activations stay float32; the weights are widened to float32 as they
   * are read: the int8 weights' rounding is the only error added. */
  RECUR_INT8_ACTIVATIONS_FLOAT = 1,
  /* Each activation row is quantised to int8 with a scale of its own and
   * multiplied by the weights in integer arithmetic (exact int32 sums), as
   * the onednn backend does: faster (2.2-2.5x at batch 1 on AVX2), with the
   * activations' rounding added, at most scale_x/2 per element. Layers wider
   * than 16384 inputs run FLOAT; K-quant and q8_0 layers as AUTO. */
  RECUR_INT8_ACTIVATIONS_QUANTIZED = 2,
  /* As llama.cpp's CPU backend: the activations of q8_0 layers and of int4
   * layers with groups of 32 (GGUF's Q8_0 and Q4_0) are quantised in blocks
   * of 32 (its Q8_0), those of q4_k, q5_k and q6_k layers in blocks of 256
   * (its Q8_K), and multiplied in integer arithmetic block by block; those
   * of f16 and bf16 layers are rounded to f16 or bf16 (to nearest, ties to
   * even) and multiplied in f32: the numbers llama.cpp computes on the same
   * GGUF file, up to the order of its float sums (docs/layouts.md "Against
   * llama.cpp itself"). int8 layers run QUANTIZED; f32 layers, and layers
   * wider than 16384 inputs, FLOAT. Faster than FLOAT for single rows of
   * q4_k, q6_k and q8_0 on x86 from AVX2 (ggml's operations), for 8 rows or
   * more of them on AVX-512 VNNI (an integer GEMM), and for single rows of
   * f16 layers of 1 MiB or more (half the activation bytes; ~10% a step of
   * an 0.4B F16 RWKV-7, docs/performance.md); elsewhere a portable kernel,
   * slower. */
  RECUR_INT8_ACTIVATIONS_BLOCKS = 3
} recur_int8_activations;

typedef struct recur_session_options {
  size_t struct_size;    /* sizeof(recur_session_options) */
  uint32_t batch;        /* streams stepped together; 0 means 1 */
  uint32_t threads;      /* intra-op threads; 0 and 1 mean the calling thread only */
  uint32_t prefill_chunk;  /* positions per chunk in recur_session_prefill; 0 = default: 64, or
                              max(64, ceil(256 / batch)) when a step reads more than 8 MiB
                              of weights. Scratch memory grows with batch × prefill_chunk. */
  const char* backend;   /* GEMM backend for the dense layers: "highway", "xnnpack" or "onednn"
                            runs every layer it supports on it (highway the rest); NULL, ""
                            or "auto" picks the fastest per layer shape, measured at creation,
                            among backends that never allocate while stepping: oneDNN's
                            execute makes small heap allocations per call, so "onednn" runs
                            only when named. "onednn" runs f32, bf16 and int8 weights; it
                            rounds activations to bf16 for bf16 weights and quantises each
                            activation row to int8 (a scale per row) for int8 weights, so
                            its results deviate more (docs/correctness.md
                            "Reduced-precision weights"). A backend this build lacks is RECUR_UNSUPPORTED. */
  uint32_t weight_packing; /* a recur_weight_packing; 0 = RECUR_PACKING_AUTO. A packed copy
                              costs 4 bytes per weight (int4 row panels 0.5625,
                              block-quantised tiles 0.5625 for q4_k, 1.08 for q6_k
                              and 1.13 for q8_0);
                              recur_session_backends reports the bytes held. A backend named
                              above copies as it must. */
  uint32_t prefill_min;    /* recur_session_prefill of fewer positions than this runs them as
                              steps (cheaper than a chunk of a few rows); 0 = default (see
                              docs/performance.md "Prefill threshold"); 1 = always the
                              chunked form. */
  uint32_t max_context;    /* models whose state grows with the sequence (softmax attention's
                              KV cache, state_bytes_per_position > 0): positions a stream may
                              hold; stepping past it is RECUR_OUT_OF_RANGE until the stream is
                              reset. 0 = the model's max_positions if it has one (learned
                              positions, rotary tables), else 4096, capped at recur_model_info's
                              max_context_bound; more than that bound is
                              RECUR_INVALID_ARGUMENT. Memory: batch × max_context ×
                              state_bytes_per_position. Ignored by fixed-state models. */
  void* arena;             /* optional caller-owned memory, recur_session_arena_size bytes (any
                              alignment): the session and all its buffers are carved from it,
                              so from recur_session_create to recur_session_free nothing is
                              allocated on the heap (error messages aside). The arena must stay
                              valid and untouched until recur_session_free, which does not free
                              it. Such a session runs on the calling thread (threads 1), its dense
                              layers on highway with the model's weights as they are (backend
                              NULL, "", "auto" or "highway"; weight_packing not ON), and has no
                              recur_session_encode or recur_session_fork: RECUR_UNSUPPORTED.
                              NULL = the heap. */
  size_t arena_size;       /* bytes at `arena`; too few is RECUR_OUT_OF_MEMORY */
  uint32_t state_sums;     /* a recur_state_sums; 0 = RECUR_STATE_SUMS_COMPENSATED. A state
                              blob saved under one kind loads only into sessions of the
                              same kind (RECUR_INVALID_STATE names both); models without
                              linear attention keep no such sums, and ignore it. Other
                              values are RECUR_INVALID_ARGUMENT. */
  uint32_t int8_activations; /* a recur_int8_activations; 0 = RECUR_INT8_ACTIVATIONS_AUTO.
                                Applies to int8 layers the highway backend runs (onednn
                                always quantises; an arena session runs FLOAT). Other values
                                are RECUR_INVALID_ARGUMENT. */
} recur_session_options;

/* recur_session_options with struct_size = sizeof(recur_session_options) and
 * every other field at its default (zero, as each field's comment says: one
 * stream, the calling thread, backend "auto", no arena). Set the fields that
 * differ by name. Nothing to free; thread-safe; never fails. */
RECUR_INLINE recur_session_options recur_session_options_default(void) {
#ifdef __cplusplus
  recur_session_options options = {};
#else
  recur_session_options options = {0};
#endif
  options.struct_size = sizeof(recur_session_options);
  return options;
}

/* The bytes of arena a session with these options needs (options->arena
 * itself is not used), for `model` on this machine: the kernels' scratch
 * depends on the SIMD target, so ask on the device. Errors: as
 * recur_session_create for bad options, and RECUR_UNSUPPORTED for options an
 * arena session cannot have. */
recur_status recur_session_arena_size(const recur_model* model,
                                      const recur_session_options* options, size_t* bytes);

/* Creates a session over `options->batch` streams, all in the initial state.
 * The session's memory is allocated here; stepping, prefill and state calls
 * allocate nothing more, with one exception: on the heap, the dense kernels
 * keep a scratch buffer per thread that grows the first time that thread
 * runs a larger layer shape (kept until the thread ends, shared by every
 * session on it). A session on an arena (see `arena`) never allocates. The
 * session keeps the model alive (see recur_model_free). Errors: RECUR_INVALID_ARGUMENT, RECUR_UNSUPPORTED,
 * RECUR_OUT_OF_MEMORY. */
recur_status recur_session_create(const recur_model* model, const recur_session_options* options,
                                  recur_session** out);

/* Frees a session. NULL is a no-op. */
void recur_session_free(recur_session* session);

/* One element per stream. Exactly one of the pointers is set, matching the
 * model's input kind; `count` is the number of values it points to, checked
 * against the session (batch token ids, or batch × feature_width floats). */
typedef struct recur_input {
  const int32_t* tokens;   /* [batch] token ids */
  const float* features;   /* [batch, feature_width] frames, row-major */
  size_t count;            /* values in tokens or features */
} recur_input;

/* Advances every stream by one element in RNN mode (constant time and memory
 * per element) and writes [batch, output_width] floats to `out`.
 * Errors (the session is left unchanged): RECUR_INVALID_ARGUMENT (null or
 * wrong kind of input, a count that does not match batch and feature width,
 * non-finite features: NaN/Inf inputs are rejected, never propagated),
 * RECUR_OUT_OF_RANGE (a token id outside the vocabulary, a stream past
 * max_positions). */
recur_status recur_session_step(recur_session* session, const recur_input* input, float* out);

/* Feeds `steps` elements to every stream at once in chunked-parallel mode
 * (docs/attention-math.md §3: each chunk's projections and FFNs are matrix products
 * over batch × chunk rows): a prompt, or a whole utterance. Input is
 * stream-major: tokens [batch, steps] or features [batch, steps, feature_width],
 * with input->count the number of values. `out` receives
 * [batch, steps, output_width] floats, or nothing when NULL (only the state
 * is wanted). Leaves the state that `steps` calls of recur_session_step
 * leave, to floating-point tolerance, so stepping can continue seamlessly.
 * steps == 0 (an empty prompt) does nothing. Errors as recur_session_step,
 * and RECUR_INVALID_ARGUMENT for a batch × steps × width too large to
 * address; on error the session is left unchanged. */
recur_status recur_session_prefill(recur_session* session, size_t steps, const recur_input* input,
                                   float* out);

/* Runs every stream's whole sequence of `steps` elements at once, from an
 * empty history, and writes [batch, steps, output_width] floats to `out`.
 * The session's stream states are neither used nor changed. This is how
 * non-causal (encoder) models run — every position attends to the whole
 * sequence, so they have no recurrent form, and recur_session_step and
 * recur_session_prefill refuse them with RECUR_UNSUPPORTED. For causal
 * models it equals a reset followed by a prefill. Input as for prefill.
 * Allocates working memory for batch × steps positions on each call, so a
 * session on an arena refuses it (RECUR_UNSUPPORTED). At most 2^24 positions
 * per call (RECUR_OUT_OF_RANGE); errors otherwise as prefill. */
recur_status recur_session_encode(recur_session* session, size_t steps, const recur_input* input,
                                  float* out);

/* Returns `stream` (or every stream, for -1) to the initial state.
 * Errors: RECUR_OUT_OF_RANGE. */
recur_status recur_session_reset(recur_session* session, int stream);

/* Bytes of a saved stream state (header + payload) for this session. */
recur_status recur_session_state_size(const recur_session* session, size_t* size);

/* Copies the state of `stream` into `buffer` (at least state_size bytes).
 * The blob names the model it belongs to and carries a checksum. */
recur_status recur_session_state_save(const recur_session* session, int stream, void* buffer,
                                      size_t size);

/* Replaces the state of `stream` with a blob from recur_session_state_save;
 * `size` is the blob's length, exactly recur_session_state_size (not the
 * capacity of a larger buffer). A blob from another model, from a session
 * with another max_context or other state_sums, truncated or corrupted, is
 * refused with RECUR_INVALID_STATE and the session is left unchanged. */
recur_status recur_session_state_load(recur_session* session, int stream, const void* buffer,
                                      size_t size);

/* Creates an independent copy of a session, states included, on the heap.
 * A session on an arena cannot be forked (RECUR_UNSUPPORTED): create one on
 * another arena and load a saved state into it. */
recur_status recur_session_fork(const recur_session* session, recur_session** out);

/* Called after every block with that block's output: the residual stream
 * (a reversible model's two streams summed, x1 + x2, also when the model
 * concatenates them for its final norm and head), [batch, steps, width]
 * floats (width = d_model),
 * stream-major, valid during the call only. `steps` is the positions of the
 * call that ran the block: 1 for recur_session_step, a chunk of
 * recur_session_prefill, the whole sequence of recur_session_encode. For
 * parity checks and debugging (recur-parity); it runs on the calling thread,
 * in the middle of the call, and must not call the session. */
typedef void (*recur_layer_callback)(void* user, uint32_t layer, const float* x, size_t batch,
                                     size_t steps, size_t width);

/* Sets the session's layer callback; NULL removes it. A fork starts without
 * one. Errors: RECUR_INVALID_ARGUMENT (null session). */
recur_status recur_session_set_layer_callback(recur_session* session,
                                              recur_layer_callback callback, void* user);

/* The name of the SIMD target the kernels dispatch to ("AVX3_VNNI", "AVX3",
 * "AVX2", "NEON", ...): the best this build has for this CPU, under the
 * ceiling of recur_set_max_simd_target or the RECUR_MAX_SIMD_TARGET
 * environment variable. AVX3_VNNI is AVX3 with the int8 and int4 kernels on
 * AVX512-VNNI. */
const char* recur_simd_target(void);

/* Caps the SIMD targets the kernels may dispatch to at `name`, one of
 * Highway's target names that this build compiles or "AVX3_VNNI"
 * (case-insensitive, e.g. "AVX3" for AVX-512 without VNNI, "AVX2", "SSE4",
 * "EMU128", "NEON"), so that this CPU runs the kernels a
 * smaller CPU would; a cap above what the CPU has changes nothing; NULL or ""
 * lifts it. Without this call, the first model load or recur_simd_target
 * reads the cap from the environment variable RECUR_MAX_SIMD_TARGET (an
 * unknown name there makes every load fail with RECUR_INVALID_ARGUMENT naming
 * it); this call overrides it. The GEMM backends have caps of their own (ONEDNN_MAX_CPU_ISA for
 * oneDNN; XNNPACK has none). Threading: not concurrently with any other call
 * into the library. Errors: RECUR_INVALID_ARGUMENT (an unknown name; the
 * message lists the known ones; the cap is unchanged), RECUR_INVALID_STATE
 * (sessions exist: each sized its scratch for the target it was created
 * under). */
recur_status recur_set_max_simd_target(const char* name);

/* Which GEMM backend runs the session's dense layers, per planned row count,
 * and the bytes of weight copies the session holds, e.g.
 * "rows 64: highway x33 xnnpack x2; rows 4096: highway x35; weight copies 25.8 MB".
 * The string lives as long as the session. NULL for a null session. Like
 * every session call (const or not), not concurrently with another call on
 * the same session: the first call fills a cache. */
const char* recur_session_backends(const recur_session* session);

/* ------------------------------------------------------- platform layer */

/* The few operating-system services the library uses, overridable by the
 * application (platforms/ holds the defaults: POSIX, or a minimal one without a
 * file system for bare-metal-like builds, chosen by CMake RECUR_PLATFORM).
 * There is no abort hook: the library never aborts; every failure is a status. */
typedef struct recur_platform {
  size_t struct_size; /* sizeof(recur_platform) */
  void* user;         /* passed to each function below */
  /* Makes the whole file at `path` readable at *data (*size bytes, 64-byte
   * aligned) until unmap_file(user, *data, *size, *handle). With
   * read_into_memory, a private copy rather than a mapping
   * (RECUR_LOAD_NO_MMAP). Returns RECUR_OK, or the error's status (e.g.
   * RECUR_IO_ERROR, RECUR_OUT_OF_MEMORY) after writing a message to
   * error[0, error_size). Used by recur_model_load_file. */
  recur_status (*map_file)(void* user, const char* path, int read_into_memory, const void** data,
                           size_t* size, void** handle, char* error, size_t error_size);
  void (*unmap_file)(void* user, const void* data, size_t size, void* handle);
  /* A monotonic clock in nanoseconds: times the GEMM backends when a session
   * picks them automatically. A clock that always returns 0 makes that
   * choice the first backend (highway). */
  uint64_t (*now_ns)(void* user);
  /* Receives every error as it is returned, with the message that
   * recur_last_error gives on that thread (e.g. to forward it to a device
   * log). May be called on any thread that calls the library. */
  void (*log)(void* user, recur_status status, const char* message);
  /* The bytes of the CPU's last-level cache: a session whose step reads more
   * weights than this reads them from memory at every step and runs even its
   * small layers as streams. 0 where unknown (8 MiB is then assumed). The
   * default: on Linux the largest data cache of CPU 0 in
   * /sys/devices/system/cpu/cpu0/cache (once a process), elsewhere 0. */
  size_t (*last_level_cache_bytes)(void* user);
} recur_platform;

/* Replaces the platform functions; NULL members (or a NULL platform) keep the
 * build's defaults. Models already loaded are released through the functions
 * that loaded them. Not thread-safe: call it before any other recur function
 * runs on another thread. Errors: RECUR_INVALID_ARGUMENT (struct_size, or
 * map_file without unmap_file or the other way round). */
recur_status recur_set_platform(const recur_platform* platform);

/* The GEMM backends compiled into this library, e.g. "highway, xnnpack, onednn". */
const char* recur_backends(void);

/* The most intra-op threads a session of this build may use
 * (recur_session_options.threads): 256 when built with worker threads, 1
 * without (the minimal configuration), where asking for more is
 * RECUR_UNSUPPORTED. */
uint32_t recur_max_threads(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* RECUR_RECUR_H_ */
