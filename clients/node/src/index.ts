/**
 * A client of the proxypool daemon: leases over its socket (Unix or `tcp://` with a
 * token), typed answers and errors, the gateway's URLs and responses. The Crawlee
 * integration is `proxypool-client/crawlee`.
 *
 * ```js
 * import { Client } from "proxypool-client";
 *
 * const client = new Client(); // finds the daemon by the same rule as the CLI
 * const page = await client.leased((lease) => fetchThrough(lease.proxy, url), { schemes: ["http", "https"] });
 * ```
 */

export { VERSION } from "./version.js";
export { type Address, type TcpAddress, formatAddress, parseAddress } from "./address.js";
export type { DownTarget, EndpointInfo, Outcome, PaceStatus, PoolStatus, ReportAnswer } from "./answers.js";
export type { EndpointsQuery, LeaseRef, LeaseRequest, ReportDetails } from "./calls.js";
export { type Classification, classifyError, classifyStatus } from "./classify.js";
export { Client, type CallOptions, type ClientOptions, type ReportOptions } from "./client.js";
export { defaultAddress, defaultDbPath, defaultSocketPath } from "./discovery.js";
export {
  BadRequest,
  DestinationDown,
  ERRORS,
  Forbidden,
  InternalError,
  LeaseExpired,
  Paced,
  PoolEmpty,
  PoolExhausted,
  ProtocolError,
  ProxyPoolError,
  StaleClaim,
  StoreUnavailable,
  TooLarge,
  TransportError,
  UnknownLease,
  UnknownOp,
  UnknownPool,
  errorFor,
} from "./errors.js";
export {
  ENDPOINT_HEADER,
  ERROR_HEADER,
  type GatewayRoute,
  POOL_HEADER,
  type ResponseLike,
  type ResponseVerdict,
  type SessionReport,
  classifyResponse,
  gatewayUrl,
  gatewayUsername,
  retryAfterMs,
} from "./gateway.js";
export { Lease, type LeaseOptions, exitReport } from "./lease.js";
export type { Logger } from "./logger.js";
export type { Duration, Reply } from "./protocol.js";
export { ReportableError, type ReportableDetails } from "./reportable.js";
export {
  type Blame,
  DEFAULT_BAN_STATUSES,
  type EndpointState,
  PHASES,
  type Phase,
  REASONS,
  type Reason,
  STATES,
  isPhase,
  isReason,
} from "./vocabulary.js";
