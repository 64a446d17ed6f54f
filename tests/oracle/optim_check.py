#!/usr/bin/python3
"""Reference values for gemmakit's AdamW, gradient clipping and learning-rate schedule.

    optim_check.py IN.json OUT.json

Driven by src/engines/train/adamw_test.cc, which writes IN, compares OUT with its own results
and skips when /usr/bin/python3 cannot import torch.

IN:
  {"runs": [{"options": {"beta1", "beta2", "eps", "weight_decay"},
             "max_grad_norm": float (0: no clipping),
             "schedule": {"init_value", "peak_value", "warmup_steps", "decay_steps",
                          "end_value", "exponent"},
             "params": [[float, ...], ...],            # initial buffers
             "grads": [[[float, ...], ...], ...]}],    # per step, per buffer
   "schedules": [{..same keys as "schedule".., "steps": N}]}
OUT:
  {"runs": [{"params": [per step: [per buffer: [...]]],   # after each update
             "lr": [per step],                          # the rate the update used
             "grad_norm": [per step],                   # before clipping
             "hf_lr": [per step] or null}],             # see below
   "schedules": [{"optax": [N values], "hf": [N values] or null}]}

Each run feeds the same parameter/gradient sequence to torch.optim.AdamW (float32 tensors, as
the trainer's buffers), with the learning rate of update k taken from a Python transcription of
optax.warmup_cosine_decay_schedule at count k (optax's scale_by_schedule reads the count before
incrementing it, so the first update uses init_value). Clipping follows
torch.nn.utils.clip_grad_norm_ except its +1e-6 in the divisor (optax.clip_by_global_norm has
none): the norm is the one clip_grad_norm_ returns, the factor min(1, max_norm / norm).

When the schedule has the shape transformers.get_cosine_schedule_with_warmup produces (init 0,
end 0, exponent 1), the run is repeated with that formula driving torch.optim.lr_scheduler.LambdaLR
the way the Hugging Face Trainer drives it (optimizer.step(), then scheduler.step()), recording
the lr in the param group at each optimizer.step(); "hf_lr" holds those.

Off-by-one conventions (why the two agree):
  * LambdaLR's constructor already applies lambda(0), and the Trainer steps the scheduler after
    the optimizer, so update k (0-based) uses lambda(k), as optax's count-k convention does.
    The Trainer's logged "learning_rate" at global step k+1 is read after scheduler.step():
    lambda(k+1), the rate of the *next* update, so its logs lead the rates used by one step.
  * Warm-up: lambda(k) = k / W, so update 0 has lr 0 and update W is the first at the peak;
    optax's linear_schedule(0, peak, W) gives the same values at the same counts.
  * Decay: HF's progress = (k - W) / (T - W) with T = num_training_steps; optax's cosine part
    covers decay_steps - W counts, so decay_steps = T gives identical rates for k < T. The last
    update (k = T-1) has a small positive rate; the 0 at k = T is never used.
  * Beyond T they differ: optax clamps the count and stays at end_value, HF's
    max(0, 0.5·(1 + cos(π·progress))) climbs back up for progress in (1, 2). "hf" values are
    therefore compared only for k < T.
  * AdamW's own bias-correction step t is k + 1 (torch and optax both count t = 1 on update 0).
"""

import json
import math
import sys

import torch


def optax_warmup_cosine_decay(init_value, peak_value, warmup_steps, decay_steps, end_value=0.0,
                              exponent=1.0):
    """optax/schedules/_schedule.py, transcribed in float64:

    join_schedules([linear_schedule(init, peak, warmup),
                    cosine_decay_schedule(peak, decay_steps - warmup, alpha, exponent)],
                   [warmup])  with  alpha = 0 if peak == 0 else end / peak.
    """
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value

    def linear(count):  # polynomial_schedule with power 1
        if warmup_steps <= 0:
            return init_value
        count = min(max(count, 0), warmup_steps)
        frac = 1 - count / warmup_steps
        return (init_value - peak_value) * (frac ** 1) + peak_value

    cos_steps = decay_steps - warmup_steps
    if not cos_steps > 0:
        raise ValueError('optax requires decay_steps > warmup_steps')

    def cosine(count):
        count = min(float(count), float(cos_steps))
        cosine_decay = 0.5 * (1 + math.cos(math.pi * count / cos_steps))
        decayed = (1 - alpha) * cosine_decay ** exponent + alpha
        return peak_value * decayed

    def schedule(step):
        output = linear(step)
        if not step < warmup_steps:
            output = cosine(step - warmup_steps)
        return output

    return schedule


def hf_cosine_with_warmup_lambda(num_warmup_steps, num_training_steps, num_cycles=0.5):
    """transformers.optimization.get_cosine_schedule_with_warmup's lr_lambda, written out."""

    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        progress = float(current_step - num_warmup_steps) / float(
            max(1, num_training_steps - num_warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))

    return lr_lambda


def hf_shaped(s):
    return s['init_value'] == 0.0 and s['end_value'] == 0.0 and s['exponent'] == 1.0


def run_adamw(run, lr_of_step=None, hf=False):
    o = run['options']
    s = run['schedule']
    params = [torch.tensor(p, dtype=torch.float32, requires_grad=True) for p in run['params']]
    peak = s['peak_value']
    opt = torch.optim.AdamW(params, lr=peak, betas=(o['beta1'], o['beta2']), eps=o['eps'],
                            weight_decay=o['weight_decay'])
    sched = None
    if hf:
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, hf_cosine_with_warmup_lambda(s['warmup_steps'], s['decay_steps']))
    out = {'params': [], 'lr': [], 'grad_norm': []}
    for k, step_grads in enumerate(run['grads']):
        for p, g in zip(params, step_grads):
            p.grad = torch.tensor(g, dtype=torch.float32)
        # clip_grad_norm_ with an infinite max_norm measures without scaling (factor clamped
        # to 1); the scaling is then applied without its +1e-6.
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm=float('inf')))
        out['grad_norm'].append(norm)
        max_norm = run['max_grad_norm']
        if max_norm > 0 and norm > max_norm:
            factor = torch.tensor(max_norm / norm, dtype=torch.float32)
            for p in params:
                p.grad.mul_(factor)
        if not hf:
            for group in opt.param_groups:
                group['lr'] = lr_of_step(k)
        out['lr'].append(opt.param_groups[0]['lr'])
        opt.step()
        if sched is not None:
            sched.step()
        out['params'].append([p.detach().tolist() for p in params])
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    result = {'runs': [], 'schedules': []}
    for run in spec['runs']:
        s = run['schedule']
        fn = optax_warmup_cosine_decay(s['init_value'], s['peak_value'], s['warmup_steps'],
                                       s['decay_steps'], s['end_value'], s['exponent'])
        out = run_adamw(run, lr_of_step=fn)
        out['hf_lr'] = None
        if hf_shaped(s):
            hf = run_adamw(run, hf=True)
            out['hf_lr'] = hf['lr']
            # Same rates, so the same parameters; a mismatch here is the oracle's own bug.
            for a, b in zip(out['params'], hf['params']):
                for pa, pb in zip(a, b):
                    assert all(abs(x - y) <= 1e-6 * max(1.0, abs(y)) for x, y in zip(pa, pb)), \
                        'HF-driven run diverged from the optax-driven one'
        result['runs'].append(out)
    for s in spec['schedules']:
        fn = optax_warmup_cosine_decay(s['init_value'], s['peak_value'], s['warmup_steps'],
                                       s['decay_steps'], s['end_value'], s['exponent'])
        entry = {'optax': [fn(k) for k in range(s['steps'])], 'hf': None}
        if hf_shaped(s):
            lam = hf_cosine_with_warmup_lambda(s['warmup_steps'], s['decay_steps'])
            entry['hf'] = [s['peak_value'] * lam(k) for k in range(s['steps'])]
        result['schedules'].append(entry)
    with open(sys.argv[2], 'w') as f:
        json.dump(result, f)


if __name__ == '__main__':
    main()
