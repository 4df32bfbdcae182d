// Package events is sandgate's durable log of lifecycle events (DESIGN.md
// §13, issue 27): session.*, run.*, approval.* and egress.denied. Every
// event is appended to the audit database ([audit.Database], SQLite or
// PostgreSQL) and from there
//
//   - served as Server-Sent Events ([Log.ServeSSE]), resumable with
//     Last-Event-ID and filtered by tenant, and
//   - delivered to the webhooks of [Config.Webhooks], signed as the Standard
//     Webhooks specification says (webhook-id, webhook-timestamp,
//     webhook-signature), at least once, in event order per endpoint, with
//     a delivery log an admin can read ([Log.Deliveries]).
//
// An event carries digests and outcomes, never code: the caller decides
// what goes into Data, and must keep it so.
//
// # Ids in commit order
//
// Event ids come from a one-row counter (events_counter) that the appending
// transaction increments. The row lock it takes is held until commit, so on
// PostgreSQL appends from every replica are serialised and an id is never
// visible before a lower one: a reader that resumes after id N never skips
// an event that committed late with an id below N. On SQLite the write lock
// serialises appends already.
//
// # Other replicas' events
//
// On PostgreSQL each append also sends NOTIFY (channel [NotifyChannel],
// payload the id) in its transaction, and every Log LISTENs on one pooled
// connection: an SSE reader or a webhook deliverer on replica B hears of an
// event appended on A within milliseconds, which the p99 ≤ 200 ms delivery
// target needs when the replica delivering an endpoint is not the one that
// published (polling every 250 ms alone would miss it). The table is also
// polled every [Config.PollInterval] as a safety net for notifications
// lost while the LISTEN connection reconnects.
//
// # Webhook delivery
//
// Each endpoint (tenant and URL) has a row holding how far it has been
// delivered (delivered_through) and a lease: the replica delivering it and
// until when. A replica delivers an endpoint only while it holds the lease,
// taken with a conditional UPDATE against the database's clock and renewed
// as it goes (during a slow attempt too); a replica that dies stops
// renewing, and another takes over once the lease lapses ([Config.Lease]). Delivery is in event order: event
// N+1 is not sent before N succeeded. A failed attempt is retried with
// exponential backoff from [Config.RetryMin] doubling to [Config.RetryMax]
// (or the receiver's Retry-After, within that cap), so a receiver that
// comes back after an outage gets the backlog within RetryMax. Progress is
// recorded in the database after every attempt, so a restart or a takeover
// resumes where delivery stopped; an event whose success was not recorded
// is sent again with the same webhook-id ("evt_<id>"), which receivers use
// to drop duplicates. Only a 2xx answer counts as delivered: redirects are
// not followed, and every other answer (410 Gone included) or none is
// retried.
//
// A new endpoint starts at the end of the log: it receives events appended
// after it was first configured. An endpoint is its tenant and full URL:
// changing its secret or its Types keeps its progress; an endpoint removed
// from the configuration and added back later resumes where it stopped. Retention ([Config.MaxAge]) bounds how
// long a receiver may be down: events older than that are pruned, delivered
// or not.
package events
