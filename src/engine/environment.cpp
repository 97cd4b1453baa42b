// environment_report() (include/sparse3d/engine.h): the contract layer's fingerprint of this
// process, for clients that have no Engine (`sparse3d info`).
#include "contract/fingerprint.h"
#include "sparse3d/engine.h"

namespace sparse3d {

std::string environment_report(bool json) {
  const s3d::contract::Fingerprint f = s3d::contract::environment_fingerprint();
  return json ? f.to_json().dump(2) + "\n" : f.to_text();
}

}  // namespace sparse3d
