// An always-on service: it keeps state between calls.
const started = new Date();
let served = 0;

exports.handle = async () => {
  served += 1;
  return { now: new Date().toISOString(), up_since: started.toISOString(), served };
};
