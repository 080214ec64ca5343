# Median time of each convolution call (forward, backward) in order of the step, over 10 steps.
#   python3 per_call.py TRACE.json
import json,statistics,sys
ev=json.load(open(sys.argv[1]))
ev=ev['traceEvents'] if isinstance(ev,dict) else ev
for name in ['aten::mkldnn_convolution','aten::convolution_backward']:
  c=[e for e in ev if e.get('name')==name and e.get('ph')=='X']
  c.sort(key=lambda e:float(e['ts']))
  n=55
  per=[statistics.median([float(c[s*n+i]['dur']) for s in range(10)]) for i in range(n)]
  print(name, ' '.join('%.0f'%p for p in per)); print('sum ms', sum(per)/1e3)
