// What start-up decided, persisted (docs/FORMATS.md "Qualification cache"): the null-context
// probe's verdict per condition length and the searched library plans, each stored under a
// key made of the environment fingerprint, the checkpoint's content hash (the probe) and the
// shape, so that the next process on the same machine and checkpoint starts warm. The
// per-token-count qualifications are not stored: on the device they cost a few GEMMs, less
// than a file a service would grow by one entry per asset (docs/CONTRACTS.md). Nothing read
// back is trusted blindly: an entry whose checksum does not match its content (corrupt), whose
// fingerprint differs from this environment (stale) or whose file does not parse is refused,
// counted, logged, and the probe (or search) runs again. So is an entry whose checksum holds
// but whose content no genuine probe or search produces (a verdict of another form, a plan
// index outside the candidates a search times): the checksum guards against accidents, not
// against a person who can write the file (docs/RELIABILITY.md).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "contract/fingerprint.h"
#include "core/error.h"
#include "core/plan_search.h"
#include "io/json.h"
#include "model/null_context.h"

namespace s3d::engine {

struct CacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t refusals = 0;  // corrupt or stale entries, unreadable files
  uint64_t stores = 0;
};

// Also the store of searched library plans (core/plan_search.h): an entry per (kind, shape)
// under the environment fingerprint, independent of the checkpoint.
class QualificationCache : public plan_search::Store {
 public:
  using Log = std::function<void(const std::string&)>;
  // dir: the cache folder (created on the first store); empty: kept in memory only.
  QualificationCache(std::string dir, Log log);

  // The null-context probe's verdict for condition length L (the applicability rule's
  // facts and checks), under the same rules; a verdict the probe could not have given for a
  // model of `config` (model::verdict_problem) is refused like a corrupt one.
  std::optional<model::Applicability> find_probe(const contract::Fingerprint& fingerprint,
                                                 const std::string& weights_hash,
                                                 const model::NullContextOptions& probe,
                                                 const model::ModelConfig& config);
  void store_probe(const contract::Fingerprint& fingerprint, const std::string& weights_hash,
                   const model::NullContextOptions& probe, const model::Applicability& verdict);

  // The searched plan of a cuBLASLt or cuDNN shape (tuned_gemm, tuned_attention), under the
  // same rules; no weights: a choice depends on the environment and the shape only.
  std::optional<plan_search::Choice> find_plan(const contract::Fingerprint& fingerprint,
                                               plan_search::Kind kind, const std::string& shape);
  void store_plan(const contract::Fingerprint& fingerprint, plan_search::Kind kind,
                  const std::string& shape, const plan_search::Choice& choice);
  // plan_search::Store, under contract::context_fingerprint() (the current context's).
  std::optional<plan_search::Choice> find_plan(plan_search::Kind kind,
                                               const std::string& shape) override;
  void store_plan(plan_search::Kind kind, const std::string& shape,
                  const plan_search::Choice& choice) override;
  void refuse_plan(plan_search::Kind kind, const std::string& shape,
                   const std::string& why) override;

  const CacheStats& stats() const { return stats_; }
  std::string file() const;  // the cache file, or "" in memory

 private:
  // The file's entries ({} when absent; a corrupt file is refused, and counted if `report`).
  io::Json read_entries(bool report);
  // The trusted result stored under (fingerprint, weights, what), or nothing.
  std::optional<io::Json> find_entry(const io::Json& fingerprint, const std::string& weights,
                                     const io::Json& what);
  void store_entry(const io::Json& fingerprint, const std::string& weights, const io::Json& what,
                   const io::Json& result);
  // A found entry's result parsed strictly: a hit, or a refusal ("...: `again`") when it
  // does not parse.
  template <class Parse>
  auto parse_hit(const std::optional<io::Json>& result, Parse parse, const char* again)
      -> std::optional<decltype(parse(*result))> {
    if (!result) return std::nullopt;
    try {
      auto value = parse(*result);
      ++stats_.hits;
      return value;
    } catch (const Error& err) {
      refuse(cat(err.what(), ": ", again));
      return std::nullopt;
    }
  }
  void refuse(const std::string& why);

  std::string dir_;
  Log log_;
  io::Json memory_ = io::Json::object();  // key -> entry, when not persisted
  CacheStats stats_;
};

// The folder EngineOptions::cache_dir names, or its default: $SPARSE3D_CACHE_DIR, else
// $XDG_CACHE_HOME/sparse3d, else $HOME/.cache/sparse3d ("" when none is set).
std::string default_cache_dir();

// Serialisation of what the cache holds (no tensors), for the cache and tests. Each reader
// bounds every field by what the engine could have written: a plan choice's candidates by
// plan_search::kMaxCandidates, its index and timed count by its candidates, its variant (an
// implementation's name, which the attention path checks against those it allows) to 64
// characters, its times to finite positive values with best <= default.
model::Applicability applicability_from_json(const io::Json& j, const std::string& what);
io::Json plan_choice_to_json(const plan_search::Choice& c);
plan_search::Choice plan_choice_from_json(const io::Json& j, const std::string& what);

}  // namespace s3d::engine
