// A model's figures on the held-out split (dropout off): what `strait train` and the last site
// report every training.eval_every steps and at the end of a run.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/job_spec.h"

namespace strait::site {

// Per target: one per sample for a classifier, one per token for a language model.
struct Evaluation {
  double loss = 0.0;      // Mean cross-entropy, nats.
  double accuracy = 0.0;  // Share of targets whose arg-max logit is the label.
  // Language model: UTF-8 bytes per target token of the split (Dataset::bytes_per_token; 1 with
  // byte tokens).
  double bytes_per_token = 1.0;
};

// The per-target means of a loss sum and a count of correct targets over `targets` targets (zeros
// when there are none).
Evaluation MeanOverTargets(double loss_sum, int64_t correct, double targets);

// Bits per byte of text for a language model's loss in nats per token: loss / bytes_per_token /
// ln 2 (with byte tokens, one token is one byte).
double BitsPerByte(const Evaluation& e);

// "test accuracy 88.21%" for a classifier; "validation loss 1.234 nats/token (1.780 bits/byte),
// next-token accuracy 61.20%" for a language model (with " at 3.780 bytes/token" after bits/byte
// where a token is not one byte).
std::string DescribeEvaluation(const ModelSpec& model, const Evaluation& e);

// metrics.json fields: test_accuracy for a classifier, plus val_loss, val_bits_per_byte and
// val_bytes_per_token for a language model.
void AddEvaluationJson(const ModelSpec& model, const Evaluation& e, nlohmann::json& out);

// An evaluation of a run, once `step` steps were done.
struct StepEvaluation {
  int64_t step = 0;
  Evaluation evaluation;
};

// The line a run prints for an evaluation during training: "step 100: " and DescribeEvaluation.
std::string DescribeEvaluationAt(const ModelSpec& model, const StepEvaluation& e);

// metrics.json "evaluations": [{"step": N, "loss": ..., and AddEvaluationJson's fields}, ...] in
// the order given.
nlohmann::json EvaluationsJson(const ModelSpec& model, const std::vector<StepEvaluation>& all);

}  // namespace strait::site
