// Package risk produces static risk hints for code an AI agent wants to run.
//
// It is deliberately not a security boundary. A denylist of patterns can always
// be bypassed (string building, encodings, indirection), so "no pattern found"
// never means safe: code that is not positively proven safe is at least LOW.
// The only way to reach SAFE is an allowlist proof: the code is tokenised by a
// per-language tokenizer that understands comments and string literals, and
// every import, called function and identifier must be on a conservative
// per-language allowlist (or be defined by the code itself).
//
// Hints only escalate. The manager hands the [Assessment] to the OPA policy,
// which decides what to do with it; the isolation that actually protects the
// host lives in the executors (network-less containers, rlimits, workspace-only
// writes).
//
// What this package does not do:
//   - It never executes, imports or evaluates the analysed code (the Langflow
//     CVE-2025-3248 lesson: "validation" that runs decorators is an RCE).
//   - It does not guess the language: anything other than python, bash or
//     javascript is [ErrUnknownLanguage].
//   - It does not parse programs fully. Tokenizers are approximate; whenever
//     they are unsure (an unterminated string, an ambiguous regex literal, an
//     unknown character) the code is simply not proven SAFE.
//
// Work is bounded: Go's RE2 regexp only (linear time), regexes are gated by
// cheap substring checks on a precomputed lowercase copy, the code is
// tokenised once per call, and inputs above 1 MiB are not analysed at all (see
// [MaxAnalyzedSize]).
package risk
