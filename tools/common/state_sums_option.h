// The --state-sums option the tools share (recur_session_options.state_sums).
#ifndef RECUR_EXAMPLES_COMMON_STATE_SUMS_OPTION_H_
#define RECUR_EXAMPLES_COMMON_STATE_SUMS_OPTION_H_

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

}  // namespace tools

#endif  // RECUR_EXAMPLES_COMMON_STATE_SUMS_OPTION_H_
