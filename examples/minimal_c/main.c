/* minimal_c: load a recur model and generate tokens, one step at a time,
 * sampling each next token from the model's output distribution.
 *
 *   minimal_c MODEL.recur [STEPS] [SEED]
 *
 * The model must take token ids and output one value per token it can
 * generate: logits, probabilities or log-probabilities (recur_model_info
 * says which). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <recur/recur.h>

static int fail(const char* what, recur_status s) {
  fprintf(stderr, "%s: %s: %s\n", what, recur_status_string(s), recur_last_error());
  return 1;
}

/* Samples an index from unnormalised log-probabilities (logits). */
static int sample(const float* logits, int n, unsigned* rng) {
  float max = logits[0];
  for (int i = 1; i < n; ++i) max = logits[i] > max ? logits[i] : max;
  double total = 0;
  for (int i = 0; i < n; ++i) total += exp(logits[i] - max);
  *rng = *rng * 1103515245u + 12345u;
  double r = (double)(*rng >> 8) / (double)(1u << 24) * total;
  for (int i = 0; i < n; ++i) {
    r -= exp(logits[i] - max);
    if (r <= 0) return i;
  }
  return n - 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.recur [STEPS] [SEED]\n", argv[0]);
    return 2;
  }
  const int steps = argc > 2 ? atoi(argv[2]) : 32;
  unsigned rng = argc > 3 ? (unsigned)atoi(argv[3]) : 1u;

  recur_model* model = NULL;
  recur_status s = recur_model_load_file(argv[1], NULL, &model);
  if (s != RECUR_OK) return fail("load", s);

  recur_model_info info = {.struct_size = sizeof(recur_model_info)};
  recur_model_get_info(model, &info);
  /* Every output index must be a valid next token (an image model's vocabulary
   * may add a start token that it never outputs). */
  if (info.input_kind != RECUR_INPUT_TOKENS || info.output_width > info.vocab_size) {
    fprintf(stderr, "this example needs a token model whose output is over its vocabulary\n");
    recur_model_free(model);
    return 1;
  }

  /* All the memory the session will use, allocated once by the app (a
   * static buffer on a device without a heap): from here on the library
   * allocates nothing. */
  size_t arena_size = 0;
  s = recur_session_arena_size(model, NULL, &arena_size);
  if (s != RECUR_OK) {
    recur_model_free(model);
    return fail("arena size", s);
  }
  void* arena = malloc(arena_size);
  float* out = malloc(sizeof(float) * info.output_width);
  recur_session_options options = {.struct_size = sizeof(recur_session_options),
                                   .arena = arena, .arena_size = arena_size};
  recur_session* session = NULL;
  s = arena == NULL ? RECUR_OUT_OF_MEMORY : recur_session_create(model, &options, &session);
  if (s != RECUR_OK) {
    free(arena);
    free(out);
    recur_model_free(model);
    return fail("session", s);
  }

  int32_t token = 0;
  printf("generated:");
  for (int t = 0; t < steps && out != NULL; ++t) {
    recur_input in = {&token, NULL, 1};
    s = recur_session_step(session, &in, out);
    if (s != RECUR_OK) break;
    if (info.output_kind == RECUR_OUTPUT_PROBABILITIES) { /* sample() takes logits */
      for (uint32_t i = 0; i < info.output_width; ++i) out[i] = logf(out[i] + 1e-30f);
    }
    token = sample(out, (int)info.output_width, &rng);
    printf(" %d", token);
  }
  printf("\n");
  printf("state: %zu bytes per stream, constant over the whole sequence\n", info.state_bytes);
  printf("session: %zu bytes of arena, no heap allocation after load\n", arena_size);

  free(out);
  recur_session_free(session);
  free(arena);
  recur_model_free(model);
  if (s != RECUR_OK) return fail("step", s);
  return 0;
}
