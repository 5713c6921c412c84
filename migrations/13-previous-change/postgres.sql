-- The change each row carried before its last write (`prev_rev`), so that a daemon whose
-- guarded write landed on a change it has not read yet (another writer's edit of the URL
-- or tags, its exit address or claim, committed just before this write or while it waited
-- for the row) reads the row again instead of taking it for its own echo (docs/fleet.md, "Propagation"). Every guarded
-- write of an endpoint sets it to the row's `rev` before it and returns it: its SET sees
-- the row as it is when the write takes it, after any wait.
ALTER TABLE endpoints ADD COLUMN prev_rev BIGINT;

-- The group commit's function as migration 12 made it (and explains), except what it
-- returns for each transition: one more than the change the row carried before
-- (`prev_rev`) when it applied, 0 when it found its row changed. A daemon of the version
-- before reads any number above 0 as "applied", as it did. Its signature and grants stay.
CREATE OR REPLACE FUNCTION proxypool_commit(
    p_async boolean, p_channel text,
    p_t_id bigint[], p_t_state text[], p_t_reason text[], p_t_phase text[],
    p_t_detail text[], p_t_streak int[], p_t_reason_streak int[], p_t_cooldown_ms bigint[],
    p_t_left bigint[], p_t_from text[], p_t_trial bigint[],
    p_e_on int[], p_e_endpoint bigint[], p_e_kind text[], p_e_from text[], p_e_to text[],
    p_e_reason text[], p_e_phase text[], p_e_detail text[], p_e_lease text[],
    p_e_destination text[], p_e_status int[], p_e_blame text[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    v_seq bigint;
    v_prev bigint;
    v_epoch bigint;
    v_out bigint[];
    v_changed boolean := false;
BEGIN
    IF p_async THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO fleet_changes (seq) VALUES (nextval('fleet_change_seq'))
        RETURNING fleet_changes.seq INTO v_seq;
    v_out := ARRAY[v_seq];
    FOR i IN 1 .. coalesce(array_length(p_t_id, 1), 0) LOOP
        UPDATE endpoints SET state = p_t_state[i], reason = p_t_reason[i],
            phase = p_t_phase[i], detail = p_t_detail[i], streak = p_t_streak[i],
            reason_streak = p_t_reason_streak[i], cooldown_ms = p_t_cooldown_ms[i],
            cooldown_until = now() + p_t_left[i] * interval '1 millisecond',
            state_changed_at = now(), prev_rev = rev, rev = v_seq, claim_until = NULL
        WHERE id = p_t_id[i] AND state = p_t_from[i]
            AND (p_t_trial[i] IS NULL OR claim_epoch = p_t_trial[i])
            AND rev < v_seq
            AND NOT (p_t_from[i] = 'cooling' AND p_t_state[i] = 'probe_allowed'
                     AND COALESCE(cooldown_until > now(), false))
        RETURNING prev_rev INTO v_prev;
        IF NOT FOUND THEN
            v_prev := -1;
        END IF;
        IF v_prev < 0 AND p_t_trial[i] IS NOT NULL THEN
            SELECT claim_epoch INTO v_epoch FROM endpoints WHERE id = p_t_id[i];
            IF v_epoch IS DISTINCT FROM p_t_trial[i] AND v_epoch IS NOT NULL THEN
                RAISE EXCEPTION 'the trial of endpoint % was settled under a claim that moved on',
                    p_t_id[i] USING ERRCODE = 'PPST0';
            END IF;
        END IF;
        v_changed := v_changed OR v_prev >= 0;
        v_out := v_out || (v_prev + 1);
    END LOOP;
    -- The events' lock only when an event is written (none when every transition found
    -- its row changed).
    IF EXISTS (SELECT 1 FROM unnest(p_e_on) AS w WHERE w IS NULL OR v_out[w + 1] > 0) THEN
        -- The events' lock (the same key as every writer's): ids commit in id order.
        PERFORM pg_advisory_xact_lock(7378984100003398005);
        INSERT INTO events (endpoint, kind, from_state, to_state, reason, phase, detail,
                            lease, destination, status, blame)
        SELECT e, k, f, t, r, p, d, l, ds, s, b
        FROM UNNEST(p_e_on, p_e_endpoint, p_e_kind, p_e_from, p_e_to, p_e_reason, p_e_phase,
                    p_e_detail, p_e_lease, p_e_destination, p_e_status, p_e_blame)
            WITH ORDINALITY AS v(w, e, k, f, t, r, p, d, l, ds, s, b, o)
        WHERE w IS NULL OR v_out[w + 1] > 0
        ORDER BY o;
    END IF;
    IF v_changed THEN
        PERFORM pg_notify(p_channel, v_seq::text);
    END IF;
    RETURN v_out;
END
$$;
