// `strait tokenizer train`: trains a SentencePiece model for `data.tokenizer`.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "core/cpu_time.h"
#include "site/data/tokenizer_trainer.h"
#include "tools/command.h"

namespace strait::tools {
namespace {

int RunTrainTokenizer(site::TokenizerTrainOptions o) {
  if (o.threads == 0) o.threads = UsableCores();
  absl::StatusOr<site::TokenizerTrainResult> r = site::TrainTokenizer(o);
  if (!r.ok()) {
    std::fprintf(stderr, "strait tokenizer train: %s\n", std::string(r.status().message()).c_str());
    // Bad input (a missing or non-UTF-8 file, an impossible vocabulary): 2; anything else: 1.
    const absl::StatusCode code = r.status().code();
    return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound ? 2
                                                                                             : 1;
  }
  std::printf("wrote %s: SentencePiece %s, vocabulary %d (256 byte tokens, <unk>, %d pieces)\n",
              o.out.c_str(), o.type.c_str(), r->vocab, r->vocab - 257);
  std::printf("%s: %lld bytes -> %lld tokens, %.3f bytes/token; trained in %.2f s\n",
              o.input.c_str(), static_cast<long long>(r->bytes), static_cast<long long>(r->tokens),
              r->tokens > 0 ? static_cast<double>(r->bytes) / static_cast<double>(r->tokens) : 0.0,
              r->train_seconds);
  // Absolute: a job spec resolves a relative path against its own folder, not this one.
  std::printf("use it: data: {tokenizer: %s}, model: {vocab: %d}\n",
              std::filesystem::absolute(o.out).lexically_normal().c_str(), r->vocab);
  return 0;
}

}  // namespace

void AddTokenizerCommand(CLI::App& app, int* exit_code) {
  CLI::App* tokenizer =
      app.add_subcommand("tokenizer", "Tokenizers of language models (data.tokenizer)");
  tokenizer->require_subcommand(1);
  auto o = std::make_shared<site::TokenizerTrainOptions>();
  o->threads = 0;
  CLI::App* train = tokenizer->add_subcommand(
      "train",
      "Train a SentencePiece model on a UTF-8 text and write it to exactly --out (one file, no "
      ".vocab listing); a job spec uses it with `data: {tokenizer: MODEL}` and `model: {vocab: "
      "N}`. The model keeps the text as it is (no normalisation; spaces and newlines are tokens "
      "too), learns from the text's lines, and spells what its pieces do not cover in byte "
      "tokens, so every UTF-8 text encodes and decodes back exactly. Prints the vocabulary and "
      "the input's bytes per token. Exit code 2 for bad input.");
  train->add_option("--input", o->input, "UTF-8 text to learn from (e.g. data/kjv.txt)")
      ->required()
      ->type_name("FILE");
  train
      ->add_option("--vocab", o->vocab,
                   "Vocabulary size, the 256 byte tokens and <unk> included (model.vocab)")
      ->required()
      ->check(CLI::Range(site::kMinTokenizerVocab, site::kMaxTokenizerVocab));
  train->add_option("--out", o->out, "Model file to write, e.g. data/kjv-4096.model")
      ->required()
      ->type_name("MODEL");
  train->add_option("--type", o->type, "bpe or unigram")
      ->check(CLI::IsMember({"bpe", "unigram"}))
      ->capture_default_str();
  train
      ->add_option("--character-coverage", o->character_coverage,
                   "Share of the text's characters that get tokens of their own; the rarest "
                   "others are spelt in byte tokens")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  train->add_option("--threads", o->threads, "Threads (default: the cores it may run on)")
      ->check(CLI::NonNegativeNumber);
  train->add_flag("--verbose", o->verbose, "Show SentencePiece's own log");
  train->callback([=] { *exit_code = RunTrainTokenizer(*o); });
}

}  // namespace strait::tools
