// The session options the tools share as command-line flags
// (recur_session_options: state_sums, int8_activations).
#ifndef RECUR_TOOLS_COMMON_SESSION_OPTIONS_H_
#define RECUR_TOOLS_COMMON_SESSION_OPTIONS_H_

#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "recur/recur.h"

namespace tools {

// Adds --state-sums compensated|plain to `app`, parsed into *sums.
inline CLI::Option* AddStateSumsOption(CLI::App* app, recur_state_sums* sums) {
  return app
      ->add_option("--state-sums", *sums,
                   "Linear attention's running sums: compensated (default) or plain (half the "
                   "state, faster; exact enough for some ten thousand steps: "
                   "docs/reliability.md \"Long runs\")")
      ->transform(CLI::CheckedTransformer(std::map<std::string, recur_state_sums>{
          {"compensated", RECUR_STATE_SUMS_COMPENSATED}, {"plain", RECUR_STATE_SUMS_PLAIN}}));
}

// Adds --int8-activations auto|float|quantized|blocks to `app`, parsed into *mode.
inline CLI::Option* AddInt8ActivationsOption(CLI::App* app, recur_int8_activations* mode) {
  return app
      ->add_option("--int8-activations", *mode,
                   "int8 layers on highway: auto (default: quantized where the CPU has integer "
                   "dot products), float (f32 activations, weights widened), quantized "
                   "(activations quantised per row, integer dot products) or blocks (as "
                   "llama.cpp: activations quantised per block of 32 or 256 for q8_0, int4 "
                   "and K-quant layers, rounded to f16 or bf16 for f16 and bf16 layers)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, recur_int8_activations>{
          {"auto", RECUR_INT8_ACTIVATIONS_AUTO},
          {"float", RECUR_INT8_ACTIVATIONS_FLOAT},
          {"quantized", RECUR_INT8_ACTIVATIONS_QUANTIZED},
          {"blocks", RECUR_INT8_ACTIVATIONS_BLOCKS}}));
}

}  // namespace tools

#endif  // RECUR_TOOLS_COMMON_SESSION_OPTIONS_H_
