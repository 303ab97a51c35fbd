// commands.h: the subcommands of the `beagle` binary; each lives in src/cli/<name>.cpp.
// Each returns the process exit code; bad input throws beagle::Error (main prints it, exits 1).
#pragma once

namespace beagle {
int cmd_generate(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_datagen(int argc, char** argv);
int cmd_bench_sd(int argc, char** argv);
int cmd_gradcheck(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
}  // namespace beagle
