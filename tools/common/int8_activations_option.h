// The --int8-activations option the tools share
// (recur_session_options.int8_activations).
#ifndef RECUR_EXAMPLES_COMMON_INT8_ACTIVATIONS_OPTION_H_
#define RECUR_EXAMPLES_COMMON_INT8_ACTIVATIONS_OPTION_H_

#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "recur/recur.h"

namespace tools {

// Adds --int8-activations auto|float|quantized to `app`, parsed into *mode.
inline CLI::Option* AddInt8ActivationsOption(CLI::App* app, recur_int8_activations* mode) {
  return app
      ->add_option("--int8-activations", *mode,
                   "int8 layers on highway: auto (default: quantized where the CPU has integer "
                   "dot products), float (f32 activations, weights widened) or quantized "
                   "(activations quantised per row, integer dot products)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, recur_int8_activations>{
          {"auto", RECUR_INT8_ACTIVATIONS_AUTO},
          {"float", RECUR_INT8_ACTIVATIONS_FLOAT},
          {"quantized", RECUR_INT8_ACTIVATIONS_QUANTIZED}}));
}

}  // namespace tools

#endif  // RECUR_EXAMPLES_COMMON_INT8_ACTIVATIONS_OPTION_H_
