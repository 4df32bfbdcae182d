package events

// Standard Webhooks' symmetric signatures, shared with the other senders of
// signed webhooks (the approval channels in package confirm), so that
// there is one implementation of the scheme.

// Sign returns the webhook-signature header value of one delivery:
// "v1," and the base64 of HMAC-SHA256(key, "{webhookID}.{timestamp}.{body}"),
// as Standard Webhooks specifies.
func Sign(key []byte, webhookID string, timestamp int64, body []byte) string {
	return sign(key, webhookID, timestamp, body)
}

// ParseSecret returns the HMAC key of a Standard Webhooks secret
// ("whsec_" and the base64 of 24 to 64 bytes). Its errors never quote the
// secret.
func ParseSecret(secret string) ([]byte, error) { return decodeSecret(secret) }
