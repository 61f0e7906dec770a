// Conversions between the job API's types and rpc/millipede.capnp's.
#pragma once

#include "api/job_service.h"
#include "rpc/millipede.capnp.h"

namespace millipede::rpc {

// A job's status as the wire carries it.
void FillStatus(const JobStatusInfo& info, ::millipede::rpc::JobStatus::Builder b);

// Every sampling field as sent; the service checks the ranges (and the logit bias ids against the
// vocabulary).
SamplingParams SamplingFromWire(::millipede::rpc::Sampling::Reader s);

// The job a `submit` call's spec describes, every field as sent (the service checks them).
// Reading a malformed message throws kj::Exception, which the RPC system answers as an error.
JobRequest JobRequestFromWire(::millipede::rpc::JobSpec::Reader spec);

}  // namespace millipede::rpc
