// The transport contract as a trait, so that a type that breaks it fails at compile time with a
// sentence (echo::all_reduce asserts it). A transport T names itself (T::name) and, for each
// collective::config of a call, provides T::engine<Config>: the object that owns the workspace
// and launches (cuda_ipc/tag.cuh and nccl/tag.cuh are the two; docs/design.md says what an engine
// does).
#pragma once

#include <type_traits>

namespace echo::transport {

/// Whether T is a transport that can run calls of Config.
template <class T, class Config, class = void>
struct is_transport_for : std::false_type {};
template <class T, class Config>
struct is_transport_for<T, Config, std::void_t<decltype(T::name), typename T::template engine<Config>>>
    : std::is_convertible<decltype(T::name), const char*> {};

}  // namespace echo::transport
