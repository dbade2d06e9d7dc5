#ifndef COWSTATE_MODEL_STATE_KIND_H_
#define COWSTATE_MODEL_STATE_KIND_H_

// The kinds of keyed state and the operations on them: one list, used by the keyed-state
// model (keyed_state_model.h), the backend model and the simulator's scenario language.

#include <cstdint>

namespace cowstate::model {

// The kinds of keyed state (Flink's StateDescriptor.Type).
enum class StateKind : std::uint8_t { value, list, map, reducing, aggregating };

// The operations of keyed state (Flink's State interfaces).
enum class StateOp : std::uint8_t {
  get,      // read (value, list, reducing, aggregating; map: one user key)
  update,   // value: set; list: replace all elements (an empty list clears)
  clear,    // remove the state of (key, namespace)
  add,      // list: append; reducing, aggregating: add an input
  add_all,  // list: append several
  put,      // map: put a user key
  remove,   // map: remove a user key (removing the last one clears)
  merge,    // list, reducing, aggregating: merge source namespaces into this one
};

}  // namespace cowstate::model

#endif  // COWSTATE_MODEL_STATE_KIND_H_
