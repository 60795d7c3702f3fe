import type { Pool } from 'pg'

/**
 * The replay position of each platform-event channel, mirrored in PostgreSQL after each hand-off:
 * Redis may come back without it (restarted empty, failed over).
 */
export class ReplayPositions {
  constructor (private readonly pool: Pool) {}

  async read (channel: string): Promise<number | null> {
    const { rows } = await this.pool.query<{ replay_id: string }>(
      'SELECT replay_id FROM event_replay_positions WHERE channel = $1',
      [channel]
    )
    return rows[0] === undefined ? null : Number(rows[0].replay_id)
  }

  /**
   * Forward only, as in Redis: a late or repeated batch never rewinds it. Fenced: a write carrying
   * a lower fencing token than the last one stored (a former holder's, late) changes nothing.
   */
  async advance (channel: string, replayId: number, fencingToken: string): Promise<void> {
    await this.pool.query(
      `INSERT INTO event_replay_positions (channel, replay_id, fencing_token) VALUES ($1, $2, $3)
       ON CONFLICT (channel) DO UPDATE
         SET replay_id = GREATEST(event_replay_positions.replay_id, EXCLUDED.replay_id), fencing_token = EXCLUDED.fencing_token, updated_at = now()
       WHERE event_replay_positions.fencing_token <= EXCLUDED.fencing_token
         AND (event_replay_positions.replay_id < EXCLUDED.replay_id OR event_replay_positions.fencing_token < EXCLUDED.fencing_token)`,
      [channel, replayId, fencingToken])
  }

  /** Fenced as `advance` is. */
  async forget (channel: string, fencingToken: string): Promise<void> {
    await this.pool.query('DELETE FROM event_replay_positions WHERE channel = $1 AND fencing_token <= $2', [
      channel,
      fencingToken
    ])
  }
}
