#include "engine/qualification_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/hash.h"
#include "io/atomic_file.h"

namespace s3d::engine {
namespace {

constexpr const char* kFormat = "sparse3d-qualification-cache";
constexpr int kVersion = 1;
constexpr const char* kFileName = "qualification.json";

std::string key_of(const io::Json& fingerprint, const std::string& weights,
                   const io::Json& shapes) {
  const io::Json k = {{"fingerprint", fingerprint}, {"weights", weights}, {"shapes", shapes}};
  return hex16(content_hash(k.dump()));
}

// The checksum covers everything in the entry but itself.
std::string checksum_of(io::Json entry) {
  entry.erase("checksum");
  return hex16(content_hash(entry.dump()));
}

// "gpu_name H200 -> A100, cudnn 9.19.0 -> 9.20.0": the fields that differ.
std::string differences(const io::Json& was, const io::Json& now) {
  std::string out;
  for (auto it = now.begin(); it != now.end(); ++it) {
    const io::Json old = was.contains(it.key()) ? was.at(it.key()) : io::Json();
    if (old != it.value())
      out += cat(out.empty() ? "" : ", ", it.key(), " ", io::excerpt(old), " -> ",
                 io::excerpt(it.value()));
  }
  return out.empty() ? std::string("fields differ") : out;
}

}  // namespace

std::string default_cache_dir() {
  if (const char* d = std::getenv("SPARSE3D_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return (std::filesystem::path(x) / "sparse3d").string();
  if (const char* h = std::getenv("HOME"); h && *h)
    return (std::filesystem::path(h) / ".cache" / "sparse3d").string();
  return "";
}

model::Applicability applicability_from_json(const io::Json& j, const std::string& what) {
  S3D_CHECK(j.is_object(), what, ": the result must be an object");
  io::check_known_keys(j, {"ok", "reason", "facts"}, what);
  model::Applicability a;
  a.ok = io::get_bool_or(j, "ok", what, false);
  a.reason = io::get_string_or(j, "reason", what, "");
  S3D_CHECK(j.contains("facts") && j.at("facts").is_array(), what, ": 'facts' must be a list");
  for (const auto& f : j.at("facts")) {
    S3D_CHECK(f.is_string(), what, ": every fact must be a string");
    a.facts.push_back(f.get<std::string>());
  }
  S3D_CHECK(a.ok == a.reason.empty(), what, ": a verdict is ok exactly when it has no reason");
  return a;
}

io::Json plan_choice_to_json(const plan_search::Choice& c) {
  return {{"index", c.index},           {"candidates", c.candidates},
          {"timed", c.timed},           {"variant", c.variant},
          {"default_ms", c.default_ms}, {"best_ms", c.best_ms}};
}

plan_search::Choice plan_choice_from_json(const io::Json& j, const std::string& what) {
  S3D_CHECK(j.is_object(), what, ": the result must be an object");
  io::check_known_keys(j, {"index", "candidates", "timed", "variant", "default_ms", "best_ms"},
                       what);
  plan_search::Choice c;
  // A search keeps at most kMaxCandidates of a library's list (core/plan_search.h).
  c.candidates = static_cast<int>(io::get_int(j, "candidates", what, 1, plan_search::kMaxCandidates));
  c.index = static_cast<int>(io::get_int(j, "index", what, 0, c.candidates - 1));
  c.timed = static_cast<int>(io::get_int(j, "timed", what, 1, c.candidates));
  c.variant = io::get_string_or(j, "variant", what, "");
  S3D_CHECK(c.variant.size() <= 64, what, ": 'variant' is ", c.variant.size(),
            " characters, more than an implementation's name has");
  c.default_ms = io::get_number(j, "default_ms", what, 0, 1e9);
  c.best_ms = io::get_number(j, "best_ms", what, 0, 1e9);
  // The default is one of the candidates timed, so the kept one is never slower.
  S3D_CHECK(c.default_ms > 0 && c.best_ms > 0 && c.best_ms <= c.default_ms, what,
            ": best_ms ", c.best_ms, " and default_ms ", c.default_ms,
            " must be positive with best <= default");
  return c;
}

QualificationCache::QualificationCache(std::string dir, Log log)
    : dir_(std::move(dir)), log_(std::move(log)) {}

std::string QualificationCache::file() const {
  return dir_.empty() ? "" : (std::filesystem::path(dir_) / kFileName).string();
}

void QualificationCache::refuse(const std::string& why) {
  ++stats_.refusals;
  if (log_) log_("qualification cache: " + why);
}

io::Json QualificationCache::read_entries(bool report) {
  if (dir_.empty()) return memory_;
  const std::string path = file();
  // A folder the process cannot reach (no permission on the way, a symbolic-link loop, a
  // file where a folder should be) costs this process its qualifications, never a request:
  // counted and said, and the store after the qualification says it could not save.
  std::error_code unreachable;
  const bool present = std::filesystem::exists(path, unreachable);
  if (unreachable) {
    if (report)
      refuse(cat(path, " cannot be reached (", unreachable.message(), "): every shape is "
                 "qualified again, in memory"));
    return io::Json::object();
  }
  if (!present) return io::Json::object();
  try {
    const io::Json j = io::read_json_file(path);
    S3D_CHECK(j.is_object() && j.value("format", "") == kFormat, "not a ", kFormat, " file");
    S3D_CHECK(j.value("version", 0) == kVersion, "format version ", j.value("version", 0),
              ", this engine reads ", kVersion);
    S3D_CHECK(j.contains("entries") && j.at("entries").is_object(), "no 'entries' object");
    return j.at("entries");
  } catch (const std::exception& e) {
    if (report)
      refuse(cat(path, " is unreadable or corrupt (", e.what(), "): every shape is qualified "
                 "again and the file rewritten"));
    return io::Json::object();
  }
}

std::optional<io::Json> QualificationCache::find_entry(const io::Json& fp,
                                                      const std::string& weights,
                                                      const io::Json& what) {
  const std::string key = key_of(fp, weights, what);
  const io::Json entries = read_entries(true);
  if (entries.contains(key)) {
    const io::Json& e = entries.at(key);
    if (!e.is_object() || e.value("checksum", "") != checksum_of(e)) {
      refuse(cat("entry ", key, " is corrupt (its checksum does not match its content): "
                 "qualifying again"));
      return std::nullopt;
    }
    if (e.value("fingerprint", io::Json()) != fp || e.value("weights", "") != weights ||
        e.value("shapes", io::Json()) != what || !e.contains("result")) {
      refuse(cat("entry ", key, " does not describe this environment, checkpoint and shapes: "
                 "qualifying again"));
      return std::nullopt;
    }
    return e.at("result");
  }
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    const io::Json& e = it.value();
    if (e.is_object() && e.value("weights", "") == weights &&
        e.value("shapes", io::Json()) == what && e.value("fingerprint", io::Json()) != fp) {
      refuse(cat("entry ", it.key(), " is stale: taken in another environment (",
                 differences(e.value("fingerprint", io::Json::object()), fp),
                 "): qualifying again"));
      return std::nullopt;
    }
  }
  ++stats_.misses;
  return std::nullopt;
}

void QualificationCache::store_entry(const io::Json& fp, const std::string& weights,
                                     const io::Json& what, const io::Json& result) {
  io::Json entry = {{"fingerprint", fp}, {"weights", weights}, {"shapes", what}, {"result", result}};
  entry["checksum"] = checksum_of(entry);
  const std::string key = key_of(fp, weights, what);
  ++stats_.stores;
  if (dir_.empty()) {
    memory_[key] = entry;
    return;
  }
  // The file as it is now (another process may have added entries); stale twins dropped.
  io::Json entries = read_entries(false);
  for (auto it = entries.begin(); it != entries.end();) {
    const bool twin = it.value().is_object() && it.value().value("weights", "") == weights &&
                      it.value().value("shapes", io::Json()) == what;
    it = twin ? entries.erase(it) : std::next(it);
  }
  entries[key] = entry;
  const io::Json doc = {{"format", kFormat}, {"version", kVersion}, {"entries", entries}};
  // A cache that cannot be written costs the next process a qualification, nothing more.
  try {
    std::filesystem::create_directories(dir_);
    io::write_file_atomic(file(), doc.dump(1) + "\n");
  } catch (const std::exception& e) {
    if (log_) log_(cat("qualification cache: not saved (", e.what(), ")"));
  }
}

namespace {

io::Json probe_key(const model::NullContextOptions& p) {
  return {{"probe", {{"context_tokens", p.context_tokens}, {"probe_queries", p.probe_queries},
                     {"seed", p.seed}}}};
}

}  // namespace

std::optional<model::Applicability> QualificationCache::find_probe(
    const contract::Fingerprint& fingerprint, const std::string& weights_hash,
    const model::NullContextOptions& probe, const model::ModelConfig& config) {
  return parse_hit(find_entry(fingerprint.to_json(), weights_hash, probe_key(probe)),
                   [&](const io::Json& r) {
                     const char* what = "qualification cache probe entry";
                     model::Applicability a = applicability_from_json(r, what);
                     const std::string problem = model::verdict_problem(a, config, probe);
                     S3D_CHECK(problem.empty(), what, ": ", problem);
                     return a;
                   },
                   "probing again");
}

void QualificationCache::store_probe(const contract::Fingerprint& fingerprint,
                                     const std::string& weights_hash,
                                     const model::NullContextOptions& probe,
                                     const model::Applicability& verdict) {
  store_entry(fingerprint.to_json(), weights_hash, probe_key(probe),
              {{"ok", verdict.ok}, {"reason", verdict.reason}, {"facts", verdict.facts}});
}

namespace {

io::Json plan_key(plan_search::Kind kind, const std::string& shape) {
  return {{"plan", {{"kind", plan_search::kind_name(kind)}, {"shape", shape}}}};
}

}  // namespace

std::optional<plan_search::Choice> QualificationCache::find_plan(
    const contract::Fingerprint& fingerprint, plan_search::Kind kind, const std::string& shape) {
  // No checkpoint: "" in the weights field (entries of the other kinds always name one).
  return parse_hit(find_entry(fingerprint.to_json(), "", plan_key(kind, shape)),
                   [](const io::Json& r) {
                     return plan_choice_from_json(r, "qualification cache plan entry");
                   },
                   "searching again");
}

void QualificationCache::store_plan(const contract::Fingerprint& fingerprint,
                                    plan_search::Kind kind, const std::string& shape,
                                    const plan_search::Choice& choice) {
  store_entry(fingerprint.to_json(), "", plan_key(kind, shape), plan_choice_to_json(choice));
}

std::optional<plan_search::Choice> QualificationCache::find_plan(plan_search::Kind kind,
                                                                 const std::string& shape) {
  return find_plan(contract::context_fingerprint(), kind, shape);
}

void QualificationCache::store_plan(plan_search::Kind kind, const std::string& shape,
                                    const plan_search::Choice& choice) {
  store_plan(contract::context_fingerprint(), kind, shape, choice);
}

void QualificationCache::refuse_plan(plan_search::Kind kind, const std::string& shape,
                                     const std::string& why) {
  // The entry parsed and matched, so it was counted a hit; it is a refusal after all.
  if (stats_.hits > 0) --stats_.hits;
  refuse(cat(plan_search::kind_name(kind), " plan for ", shape, ": ", why));
}

}  // namespace s3d::engine
