// How a request's body is framed, checked once its header is read and before any of the body is:
// RFC 9112's rules for Transfer-Encoding, which this server understands only as one `chunked`
// applied last. No socket and no state, so the request parser's fuzz target checks requests as
// the server does.
#pragma once

#include <boost/beast/http.hpp>
#include <optional>

#include "http/api_error.h"

namespace millipede {

// The refusal of a request whose body cannot be read safely, or nullopt. Every refusal ends the
// connection (the body's end is unknown, so nothing after it can be trusted):
//   400 malformed_request: Transfer-Encoding in an HTTP/1.0 request, together with
//       Content-Length (a request-smuggling pattern), naming no coding, a final coding other than
//       chunked (RFC 9112 section 6.3: the body's length cannot be determined), or chunked twice;
//   501 unsupported_transfer_coding: chunked last but another coding before it (gzip, ...),
//       which this server does not implement.
// Codings are case-insensitive, may carry parameters and may span several header lines.
std::optional<ApiError> CheckRequestFraming(
    const boost::beast::http::request_header<>& header);

}  // namespace millipede
