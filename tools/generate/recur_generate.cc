// recur-generate: text in, text out. Reads a prompt with the model's
// vocabulary, streams the generated text to stdout, and saves or resumes the
// session's state; --chat keeps the state from turn to turn.
//
//   recur-generate MODEL.recur --prompt TEXT -n N [--temperature T] [--top-k K]
//                  [--top-p P] [--min-p M] [--repeat-penalty R] [--presence-penalty P]
//                  [--frequency-penalty F] [--penalty-decay D] [--penalty-last-n N]
//                  [--seed S] [--threads T] [--stop TEXT]
//                  [--state-in FILE] [--state-out FILE] [--state-after-prompt]
//                  [--chat [--template TEXT] [--reread]] [--print-ids]
//
// The session holds every token read but the last one: that one is pending,
// read (stepped) when the next token is wanted. So a state saved at any point
// is the session's state and the pending token (docs/generate.md has the
// file), and resuming from it gives the tokens an uninterrupted run gives.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "converter/file_util.h"
#include "model_file.h"
#include "recur/recur.hpp"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "\n", "\t", "\\" in a command-line text as the characters they name.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[i + 1];
      if (c == 'n' || c == 't' || c == '\\') {
        out += c == 'n' ? '\n' : c == 't' ? '\t' : '\\';
        ++i;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// A state file: "RECURGEN", uint32 version 1, int32 the pending token,
// uint64 the blob's bytes, the blob (recur_session_state_save); little-endian.
constexpr char kMagic[8] = {'R', 'E', 'C', 'U', 'R', 'G', 'E', 'N'};
constexpr size_t kHeader = 8 + 4 + 4 + 8;

struct Totals {
  size_t read = 0, generated = 0;
  double read_s = 0, generate_s = 0;
};

class Generator {
 public:
  // `penalties` apply to the last `penalty_last_n` tokens drawn by each
  // Generate call (0: all of them).
  Generator(const recur::Model& model, recur::Session* session, const recur_sampler_options& o,
            const recur_penalty_options& penalties, size_t penalty_last_n, uint64_t seed)
      : model_(model.get()),
        session_(session),
        options_(o),
        penalties_(penalties),
        penalty_last_n_(penalty_last_n),
        rng_(seed) {
    const recur_model_info info = model.info();
    probabilities_ = info.output_kind == RECUR_OUTPUT_PROBABILITIES;
    logits_.resize(info.output_width);
    uint32_t count = 0;
    recur_model_vocabulary(model_, &count, &end_of_text_);
    drawable_ = std::min<size_t>(count, info.output_width);
  }

  // Reads `tokens`, after the pending token if there is one: all but the
  // last in one prefill; the last becomes the pending token.
  recur::Status Read(std::vector<int32_t> tokens) {
    if (pending_ >= 0) tokens.insert(tokens.begin(), pending_);
    if (tokens.empty()) return recur::Status();
    const double start = Now();
    const size_t n = tokens.size() - 1;
    if (recur::Status s = session_->PrefillTokens(n, tokens.data(), n, nullptr); !s) return s;
    history_.insert(history_.end(), tokens.begin(), tokens.end() - 1);
    pending_ = tokens.back();
    totals_.read += n;
    totals_.read_s += Now() - start;
    return recur::Status();
  }

  // Generates up to `n` tokens, streaming their text to stdout (complete
  // UTF-8 characters only, nothing of `stop` or after it), or their ids with
  // `ids`. Ends at `stop`, the end-of-text token or n tokens; the last token
  // drawn is left pending. *first_s: seconds from `start` to the first token.
  recur::Status Generate(size_t n, const std::string& stop, bool ids, double start, double* first_s,
                         size_t* made) {
    std::string text;
    std::vector<int32_t> drawn;
    size_t printed = 0;
    *made = 0;
    bool ended = false;
    double t0 = Now();
    while (*made < n && !ended) {
      // The pending token's step gives the logits of the draw; the first
      // such step ends the reading of the prompt, and counts there.
      recur::Status s = session_->StepTokens(&pending_, 1, logits_.data());
      if (!s) return s;
      history_.push_back(pending_);
      pending_ = -1;
      if (*made == 0) {
        const double now = Now();
        totals_.read += 1;
        totals_.read_s += now - t0;
        t0 = now;
      }
      if (probabilities_) {
        for (size_t i = 0; i < drawable_; ++i) logits_[i] = std::log(logits_[i]);
      }
      const size_t recent =
          penalty_last_n_ == 0 ? drawn.size() : std::min(penalty_last_n_, drawn.size());
      s = recur::Status(recur_apply_penalties(
          logits_.data(), drawable_, drawn.data() + drawn.size() - recent, recent, &penalties_));
      if (!s) return s;
      int32_t token = -1;
      s = recur::Status(recur_sample(logits_.data(), drawable_, &options_, &rng_, &token));
      if (!s) return s;
      drawn.push_back(token);
      if (*made == 0) *first_s = Now() - start;
      ++*made;
      pending_ = token;
      if (ids) std::printf(*made == 1 ? "%d" : " %d", token);
      if (token == end_of_text_) break;
      const char* bytes = nullptr;
      size_t length = 0;
      s = recur::Status(recur_token_bytes(model_, token, &bytes, &length));
      if (!s) return s;
      const size_t before = text.size();
      text.append(bytes, length);
      size_t end = text.size();
      if (!stop.empty()) {
        const size_t at = text.find(stop, before >= stop.size() ? before - stop.size() + 1 : 0);
        if (at != std::string::npos) {
          end = at;
          ended = true;
        } else {
          // Hold back an end that may begin the stop text.
          for (size_t k = std::min(stop.size() - 1, text.size()); k > 0; --k) {
            if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
              end = text.size() - k;
              break;
            }
          }
        }
      }
      if (!ended) end -= recur_utf8_incomplete_tail(text.data(), end);
      if (!ids && end > printed) {
        std::fwrite(text.data() + printed, 1, end - printed, stdout);
        std::fflush(stdout);
        printed = end;
      }
    }
    if (!ids && !ended && printed < text.size()) {
      std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
    }
    std::fflush(stdout);
    if (*made > 0) {
      totals_.generated += *made;
      totals_.generate_s += Now() - t0;
    }
    return recur::Status();
  }

  int32_t pending() const { return pending_; }
  void set_pending(int32_t token) { pending_ = token; }
  // The tokens the session has read since the start (or the loaded state).
  const std::vector<int32_t>& history() const { return history_; }
  void clear_history() { history_.clear(); }
  const Totals& totals() const { return totals_; }

 private:
  const recur_model* model_;
  recur::Session* session_;
  recur_sampler_options options_;
  recur_penalty_options penalties_;
  size_t penalty_last_n_;
  uint64_t rng_;
  size_t drawable_ = 0;
  bool probabilities_ = false;
  int32_t end_of_text_ = -1;
  int32_t pending_ = -1;
  std::vector<float> logits_;
  std::vector<int32_t> history_;
  Totals totals_;
};

recur::Status Tokenize(const recur::Model& model, const std::string& text,
                       std::vector<int32_t>* ids) {
  size_t n = 0;
  recur::Status s(recur_tokenize(model.get(), text.data(), text.size(), nullptr, 0, &n));
  if (!s) return s;
  ids->resize(n);
  return recur::Status(recur_tokenize(model.get(), text.data(), text.size(), ids->data(), n, &n));
}

// Reads a state file into *blob and *pending; an error message or "".
std::string ReadState(const std::string& path, size_t blob_size, uint32_t token_count,
                      std::vector<uint8_t>* blob, int32_t* pending) {
  auto bytes = recur::impl::converter::ReadFileBytes(path);
  if (!bytes.ok()) return bytes.status().message();
  const std::vector<uint8_t>& b = bytes.value();
  if (b.size() < kHeader || std::memcmp(b.data(), kMagic, 8) != 0) {
    return path + ": not a recur-generate state file (those start with \"RECURGEN\")";
  }
  uint32_t version = 0;
  uint64_t size = 0;
  std::memcpy(&version, b.data() + 8, 4);
  std::memcpy(pending, b.data() + 12, 4);
  std::memcpy(&size, b.data() + 16, 8);
  if (version != 1) {
    return path + ": state file version " + std::to_string(version) + ", this program reads 1";
  }
  if (size != b.size() - kHeader) {
    return path + ": truncated or damaged: its header says " + std::to_string(size) +
           " bytes of state, and " + std::to_string(b.size() - kHeader) + " follow";
  }
  if (size != blob_size) {
    return path + ": a state of " + std::to_string(size) + " bytes, and this model's is " +
           std::to_string(blob_size) + ": it was saved with another model";
  }
  if (*pending < 0 || uint32_t(*pending) >= token_count) {
    return path + ": its pending token " + std::to_string(*pending) +
           " is outside this model's vocabulary of " + std::to_string(token_count);
  }
  blob->assign(b.begin() + kHeader, b.end());
  return "";
}

std::string WriteState(const std::string& path, recur::Session& session, int32_t pending) {
  auto blob = session.SaveState(0);
  if (!blob) return blob.error();
  std::vector<uint8_t> file(kHeader + blob->size());
  const uint32_t version = 1;
  const uint64_t size = blob->size();
  std::memcpy(file.data(), kMagic, 8);
  std::memcpy(file.data() + 8, &version, 4);
  std::memcpy(file.data() + 12, &pending, 4);
  std::memcpy(file.data() + 16, &size, 8);
  std::memcpy(file.data() + kHeader, blob->data(), blob->size());
  recur::impl::Status w = recur::impl::converter::WriteFileAtomic(path, file.data(), file.size());
  return w.ok() ? "" : w.message();
}

std::string Rate(size_t n, double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", s > 0 ? double(n) / s : 0.0);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Generate text with a recur model that carries a vocabulary"};
  std::string model_path, prompt, state_in, state_out, stop, chat_template;
  size_t n = 100;
  float temperature = 1.0f, top_p = 0.85f, min_p = 0.0f;
  float repeat_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f,
        penalty_decay = 1.0f;
  size_t penalty_last_n = 0;
  uint32_t top_k = 0, threads = 1;
  uint64_t seed = 0;
  bool chat = false, reread = false, state_after_prompt = false, print_ids = false;
  app.add_option("model", model_path, std::string(tools::kModelFileHelp) + ", with a vocabulary")
      ->required();
  app.add_option("--prompt,-p", prompt,
                 "Text to read before generating (with --chat: read once, before the first turn)");
  app.add_option("-n", n, "Tokens to generate (per turn with --chat); 0: only read the prompt")
      ->default_val(100);
  app.add_option("--temperature", temperature, "Softmax temperature; 0: greedy (the argmax)")
      ->default_val(1.0);
  app.add_option("--top-k", top_k, "Draw from the K most likely tokens only; 0: all")
      ->default_val(0);
  app.add_option("--top-p", top_p,
                 "Draw from the fewest most likely tokens holding this probability, in (0, 1]")
      ->default_val(0.85);
  app.add_option("--min-p", min_p,
                 "Draw from the tokens at least M times as likely as the most likely one only, "
                 "in [0, 1]; 0: all")
      ->default_val(0.0);
  app.add_option("--repeat-penalty", repeat_penalty,
                 "Divide a positive logit of a token drawn before by R, multiply a negative one "
                 "(llama.cpp's); 1: none")
      ->default_val(1.0);
  app.add_option("--presence-penalty", presence_penalty,
                 "Subtract P from the logit of each token drawn before")
      ->default_val(0.0);
  app.add_option("--frequency-penalty", frequency_penalty,
                 "Subtract F per time a token was drawn before (each time weighted by "
                 "--penalty-decay to the power of how many tokens came after it)")
      ->default_val(0.0);
  app.add_option("--penalty-decay", penalty_decay,
                 "Weight lost per newer token by an earlier draw in the frequency penalty, in "
                 "(0, 1] (the rwkv package's alpha_decay, e.g. 0.996); 1: none")
      ->default_val(1.0);
  app.add_option("--penalty-last-n", penalty_last_n,
                 "The penalties look at the last N tokens drawn (of the turn, with --chat); 0: "
                 "all of them")
      ->default_val(0);
  CLI::Option* seed_opt =
      app.add_option("--seed", seed, "Random seed (default: a random one, printed at the end)");
  app.add_option("--threads", threads, "Threads of the session")->default_val(1);
  app.add_option("--stop", stop,
                 "End generation (of each turn) where this text appears; \\n, \\t and \\\\ are "
                 "read as escapes (default: none; with --chat \"\\n\\n\")");
  app.add_option("--state-in", state_in, "Start from a state saved with --state-out");
  app.add_option("--state-out", state_out,
                 "Save the state at the end: after the prompt and the generated text (of all "
                 "turns with --chat)");
  app.add_flag("--state-after-prompt", state_after_prompt,
               "--state-out saves the state after the prompt instead, before generating");
  app.add_flag("--chat", chat,
               "Read user turns from stdin, one line each, and answer each; the state is kept "
               "from turn to turn");
  app.add_option("--template", chat_template,
                 "With --chat: the text read for each turn, {text} the line read "
                 "(default \"User: {text}\\n\\nAssistant:\"; escapes as --stop)");
  app.add_flag("--reread", reread,
               "With --chat: read the whole conversation again each turn, from the start state, "
               "instead of keeping the state (what runtimes without a kept state do)");
  app.add_flag("--print-ids", print_ids, "Print the generated token ids instead of their text");
  CLI11_PARSE(app, argc, argv);

  if (!chat && (reread || !chat_template.empty())) {
    return Fail("--reread and --template apply to --chat only");
  }
  if (state_after_prompt && state_out.empty())
    return Fail("--state-after-prompt needs --state-out");
  if (!state_out.empty() && (state_out == model_path || state_out == state_in)) {
    return Fail("--state-out " + state_out + " is an input: refusing to overwrite it");
  }
  stop = app.count("--stop") ? Unescape(stop) : chat ? "\n\n" : "";
  chat_template = Unescape(chat_template.empty() ? "User: {text}\\n\\nAssistant:" : chat_template);
  const size_t slot = chat_template.find("{text}");
  if (chat && slot == std::string::npos) return Fail("--template has no {text}");
  if (!seed_opt->count()) seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  if (!(top_p > 0)) {
    return Fail("sampling: top_p is " + std::to_string(top_p) + "; it must be in (0, 1]");
  }
  recur_sampler_options sampler = recur_sampler_options_default();
  sampler.temperature = temperature;
  sampler.top_k = top_k;
  sampler.top_p = top_p;
  sampler.min_p = min_p;
  {
    // The library checks the options: a draw from one logit.
    const float zero = 0;
    uint64_t rng = 0;
    int32_t token = 0;
    if (recur_sample(&zero, 1, &sampler, &rng, &token) != RECUR_OK) {
      return Fail(std::string("sampling: ") + recur_last_error());
    }
  }
  recur_penalty_options penalties = recur_penalty_options_default();
  penalties.repeat = repeat_penalty;
  penalties.presence = presence_penalty;
  penalties.frequency = frequency_penalty;
  penalties.decay = penalty_decay;
  if (!(repeat_penalty > 0) || !(penalty_decay > 0)) {  // 0 would read as the default
    return Fail("penalties: --repeat-penalty and --penalty-decay must be > 0");
  }
  {
    float zero = 0;
    if (recur_apply_penalties(&zero, 1, nullptr, 0, &penalties) != RECUR_OK) {
      return Fail(std::string("penalties: ") + recur_last_error());
    }
  }

  recur::Model loaded;
  std::string load_error, note;
  if (!tools::LoadModelFile(model_path, 0, &loaded, &load_error, &note)) return Fail(load_error);
  tools::PrintNote(note);
  recur::Model* model = &loaded;
  uint32_t token_count = 0;
  int32_t end_of_text = -1;
  if (recur::Status s(recur_model_vocabulary(model->get(), &token_count, &end_of_text)); !s) {
    return Fail(model_path + ": " + s.message());
  }
  if (!model->info().recurrent) {
    return Fail(model_path + " has non-causal blocks: it has no recurrent form to generate with");
  }
  recur_session_options so = recur_session_options_default();
  so.threads = threads;
  auto session = recur::Session::Create(*model, so);
  if (!session) return Fail(session.error());

  Generator gen(*model, &*session, sampler, penalties, penalty_last_n, seed);
  std::vector<uint8_t> start_blob;
  if (!state_in.empty()) {
    size_t blob_size = 0;
    recur_session_state_size(session->get(), &blob_size);
    int32_t pending = -1;
    const std::string error = ReadState(state_in, blob_size, token_count, &start_blob, &pending);
    if (!error.empty()) return Fail(error);
    if (recur::Status s = session->LoadState(0, start_blob); !s) {
      return Fail(state_in + ": " + s.message());
    }
    gen.set_pending(pending);
  }
  std::vector<int32_t> prompt_ids;
  if (recur::Status s = Tokenize(*model, prompt, &prompt_ids); !s) {
    return Fail("--prompt: " + s.message());
  }
  if (prompt_ids.empty() && state_in.empty() && !chat) {
    return Fail(
        "the prompt is empty: give --prompt TEXT (or --state-in FILE to continue a saved state)");
  }
  if (chat && state_after_prompt && prompt_ids.empty()) {
    return Fail("--state-after-prompt with --chat saves the state after --prompt: give one");
  }

  auto save = [&]() { return WriteState(state_out, *session, gen.pending()); };
  if (recur::Status s = gen.Read(prompt_ids); !s) return Fail("the prompt: " + s.message());
  if (state_after_prompt) {
    if (const std::string e = save(); !e.empty()) return Fail(e);
  }

  if (!chat) {
    double first_s = 0;
    size_t made = 0;
    if (recur::Status s = gen.Generate(n, stop, print_ids, Now(), &first_s, &made); !s) {
      return Fail(s.message());
    }
    if (made > 0) std::printf("\n");
  } else {
    const bool tty = isatty(0);
    std::string line;
    for (int turn = 1;; ++turn) {
      if (tty) std::fprintf(stderr, "> ");
      if (!std::getline(std::cin, line)) break;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const double turn_start = Now();
      std::string text = chat_template;
      text.replace(slot, 6, line);
      std::vector<int32_t> ids;
      if (recur::Status s = Tokenize(*model, text, &ids); !s) {
        return Fail("turn " + std::to_string(turn) + ": " + s.message());
      }
      const size_t read_before = gen.totals().read;
      if (reread) {
        // From the start state, the whole conversation's tokens again.
        std::vector<int32_t> all = gen.history();
        if (gen.pending() >= 0) all.push_back(gen.pending());
        all.insert(all.end(), ids.begin(), ids.end());
        recur::Status s = start_blob.empty() ? session->Reset() : session->LoadState(0, start_blob);
        if (!s) return Fail(s.message());
        gen.clear_history();
        gen.set_pending(-1);
        ids = std::move(all);
      }
      if (recur::Status s = gen.Read(ids); !s) {
        return Fail("turn " + std::to_string(turn) + ": " + s.message());
      }
      double first_s = 0;
      size_t made = 0;
      if (recur::Status s = gen.Generate(n, stop, print_ids, turn_start, &first_s, &made); !s) {
        return Fail(s.message());
      }
      std::printf("\n");
      std::fflush(stdout);
      const double turn_s = Now() - turn_start;
      std::fprintf(stderr,
                   "turn %d: %zu tokens read, first token after %.2f ms, %zu tokens in %.2f ms "
                   "(%s tokens/s after the first)\n",
                   turn, gen.totals().read - read_before, first_s * 1e3, made, turn_s * 1e3,
                   made > 1 ? Rate(made - 1, turn_s - first_s).c_str() : "-");
    }
  }
  if (!state_out.empty() && !state_after_prompt) {
    if (const std::string e = save(); !e.empty()) return Fail(e);
  }
  const Totals& t = gen.totals();
  // The text ends where the model stopped, often mid-line: the report starts a line of its own.
  if (!chat && !print_ids && t.generated > 0) std::fputc('\n', stderr);
  std::fprintf(stderr,
               "read %zu tokens in %.3f s (%s tokens/s), generated %zu tokens in %.3f s "
               "(%s tokens/s), seed %llu\n",
               t.read, t.read_s, Rate(t.read, t.read_s).c_str(), t.generated, t.generate_s,
               Rate(t.generated, t.generate_s).c_str(), static_cast<unsigned long long>(seed));
  return 0;
}
