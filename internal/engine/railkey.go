package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// RailKey is submissions.RailKey: a UUID of version 8 (RFC 9562) made of the
// SHA-256 of the tenant and the withdrawal id, each prefixed by its length,
// under a name of this scheme's own.
func RailKey(tenant, withdrawalID string) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write([]byte("submissions rail key v1\x00"))
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(tenant)))])
	h.Write([]byte(tenant))
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(withdrawalID)))])
	h.Write([]byte(withdrawalID))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // the RFC 9562 variant
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// sendCtx is the context a send runs in: its caller's, which it carries on,
// and the withdrawal being sent, for RailKeyFromContext. It is its own
// context.Context so that a send costs one allocation for it.
type sendCtx struct {
	context.Context
	tenant, withdrawalID string
}

// sendCtxKey is the Value key that finds a sendCtx.
type sendCtxKey struct{}

// Value implements context.Context.
func (c *sendCtx) Value(key any) any {
	if key == (sendCtxKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// RailKeyFromContext is submissions.RailKeyFromContext.
func RailKeyFromContext(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(sendCtxKey{}).(*sendCtx)
	if !ok {
		return "", false
	}
	return RailKey(c.tenant, c.withdrawalID), true
}
