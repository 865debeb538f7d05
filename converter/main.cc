// recur-convert: safetensors or torch.save checkpoint + config.json → .recur,
// a GGUF file (llama.cpp's rwkv7) → .recur, and inspect/verify.
//
//   recur-convert WEIGHTS.safetensors|MODEL.pt --config CONFIG.json [--layout NAME]
//                 -o MODEL.recur [--notes TEXT] [--allow-extra] [--state-dict-key KEY[.KEY...]]
//                 [--dtype f32|f16|bf16|int8|int4|...] [--group 32|64|128|256] [--quantize-head]
//                 [--tokenizer VOCAB.txt|tokenizer.json]
//   recur-convert convert ...            (the same, with an explicit subcommand)
//   recur-convert inspect MODEL.recur [--json]
//   recur-convert verify MODEL.recur
//
// Exit status 0 on success, 1 on any error, with one line on stderr:
//   error: blocks.1.ffn.linear1.weight: shape [64,32], expected [128,32]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "converter/config.h"
#include "converter/convert.h"
#include "converter/inspect.h"
#include "converter/layouts/layout_converter.h"
#include "converter/writer.h"

namespace {

using namespace recur::impl::converter;
using recur::impl::Status;

// "auto, recur, fast-transformers, ..." (aliases left out).
std::string LayoutList() {
  std::string list;
  for (const std::string& name : LayoutNames()) list += (list.empty() ? "" : ", ") + name;
  return list;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

int Run(int argc, char** argv) {
  // Without a subcommand the arguments are a conversion.
  std::vector<std::string> args(argv, argv + argc);
  if (args.size() > 1) {
    const std::string& first = args[1];
    const bool is_command = first == "convert" || first == "inspect" || first == "verify";
    const bool is_global = first == "-h" || first == "--help" || first == "--version";
    if (!is_command && !is_global) args.insert(args.begin() + 1, "convert");
  }
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());

  CLI::App app{"recur-convert " + std::string(ConverterVersion()) +
               ": converts trained weights (safetensors + config.json) into recur models"};
  app.name("recur-convert");
  app.set_version_flag("--version", DefaultProducer());
  app.require_subcommand(1);
  app.footer(
      "Without a subcommand the arguments are those of `convert`:\n"
      "  recur-convert WEIGHTS.safetensors --config CONFIG.json -o MODEL.recur\n"
      "  recur-convert RWKV7.pth -o MODEL.recur   (a BlinkDL RWKV-7 checkpoint)\n"
      "  recur-convert RWKV7.gguf -o MODEL.recur  (llama.cpp's GGUF of an RWKV-7)\n");

  ConvertOptions convert_options;
  std::string layout_name = "auto";
  CLI::App* convert = app.add_subcommand("convert", "Convert WEIGHTS.safetensors (or MODEL.pt) + CONFIG.json into a .recur model");
  convert
      ->add_option("weights", convert_options.weights_path,
                   "WEIGHTS.safetensors, a torch.save(state_dict) checkpoint (MODEL.pt, "
                   "pytorch_model.bin), or a GGUF file of llama.cpp's architecture rwkv7 or mamba2")
      ->required();
  convert->add_option("--state-dict-key", convert_options.state_dict_key,
                      "Checkpoints only: the key path of the state dict inside the saved dict, "
                      "keys of successive levels joined by dots (\"model\", \"model.encoder\")");
  convert->add_option("-c,--config", convert_options.config_path,
                      "CONFIG.json (not needed for a BlinkDL RWKV-7 .pth, whose tensors' shapes "
                      "give the configuration, nor for a GGUF file, whose metadata does)");
  convert->add_option("-o,--output", convert_options.output_path, "MODEL.recur to write")->required();
  convert->add_option("--tokenizer", convert_options.tokenizer_path,
                      "VOCAB.txt: a vocabulary in the rwkv package's format (lines \"ID LITERAL "
                      "BYTE_LENGTH\", as its rwkv_vocab_v20230424.txt), or tokenizer.json: a "
                      "Hugging Face byte-level BPE (GPT-2's, GPT-NeoX's), for the model file to "
                      "carry, so that the runtime encodes text (a recur config may name it as "
                      "\"tokenizer\" instead; a GGUF file carries its own)");
  convert
      ->add_option("--layout", layout_name,
                   "Naming and config layout of the source (" + LayoutList() +
                       "; default: the config's \"layout\", else detected)")
      ->check(CLI::IsMember(LayoutChoices()));
  convert->add_option("--notes", convert_options.notes, "Text appended to the model's metadata notes");
  convert->add_flag("--allow-extra", convert_options.allow_extra,
                    "Ignore (with a warning) tensors the config does not use");
  std::string dtype_name;  // empty: not given
  std::vector<std::string> dtype_names;
  std::string dtype_help =
      "Storage of the blocks' weight matrices (mixer query/key/value/out, ffn linear1/linear2): ";
  for (WeightType type : recur::impl::kernels::kWeightTypes) {
    dtype_names.push_back(WeightTypeName(type));
    dtype_help += std::string(dtype_names.size() > 1 ? ", " : "") + WeightTypeName(type) + " (" +
                  WeightTypeEncoding(type) + ")";
  }
  dtype_help +=
      ". Embeddings, positions, norms, biases, the input projection and the head stay f32. "
      "Default: f32; for a GGUF file, the types it stores the weight matrices and the head "
      "in (F32, F16, BF16; Q4_0 as int4 in groups of 32; Q8_0 as q8_0; Q4_K, Q5_K and Q6_K as q4_k, q5_k "
      "and q6_k; exactly)";
  convert->add_option("--dtype", dtype_name, dtype_help)->check(CLI::IsMember(dtype_names));
  convert
      ->add_option("--group", convert_options.group,
                   "int4 only: inputs per scale, 32 (default), 64, 128 or 256")
      ->check(CLI::IsMember({32, 64, 128, 256}));
  convert->add_flag("--quantize-head", convert_options.quantize_head,
                    "Store head.weight in --dtype too (the model output loses some precision)");

  std::string inspect_path;
  bool inspect_json = false;
  CLI::App* inspect = app.add_subcommand("inspect", "Print a model's structure, metadata and tensors");
  inspect->add_option("model", inspect_path, "MODEL.recur")->required();
  inspect->add_flag("--json", inspect_json, "Machine-readable JSON output");

  std::string verify_path;
  CLI::App* verify = app.add_subcommand(
      "verify", "Load a model with the runtime (full verification) and scan its weights for NaN/Inf");
  verify->add_option("model", verify_path, "MODEL.recur")->required();

  for (CLI::App* sub : {convert, inspect, verify}) sub->footer("");

  try {
    app.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (argc <= 1) {
      std::fputs(app.help().c_str(), stderr);
      return 1;
    }
    return Fail(std::string(e.what()) + " (run with --help for usage)");
  }

  if (*convert) {
    ParseLayout(layout_name, &convert_options.layout);
    if (!dtype_name.empty()) {
      WeightType dtype = WeightType::kF32;
      ParseWeightType(dtype_name, &dtype);
      convert_options.dtype = dtype;
    }
    ConvertReport report;
    Status s = ConvertFiles(convert_options, &report);
    for (const std::string& w : report.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (!s.ok()) return Fail(s.message());
    const std::string narrow = NarrowWeightsText(report);
    const std::string dtype = narrow.empty() ? "" : ", " + narrow;
    std::printf("wrote %s (%zu bytes, %zu tensors%s, %s layout, source sha256 %s)\n",
                convert_options.output_path.c_str(), report.file_bytes, report.tensors,
                dtype.c_str(), LayoutName(report.layout), report.source_hash.c_str());
    return 0;
  }
  if (*inspect) {
    std::string out;
    Status s = InspectModelFile(inspect_path, inspect_json, &out);
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    if (!s.ok()) return Fail(s.message());
    return 0;
  }
  if (*verify) {
    std::string summary;
    Status s = VerifyModelFile(verify_path, &summary);
    if (!s.ok()) return Fail(s.message());
    std::printf("%s\n", summary.c_str());
    return 0;
  }
  return Fail("no command given (run with --help for usage)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    return Fail(std::string("internal: ") + e.what());
  } catch (...) {
    return Fail("internal: unknown exception");
  }
}
