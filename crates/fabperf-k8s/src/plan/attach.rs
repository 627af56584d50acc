//! How a secondary network reaches the pod: its NetworkAttachmentDefinition
//! name and `attach` (shared RDMA device or SR-IOV VF).

use super::*;

pub(super) fn check_nad_name(cx: &mut Diagnostics, v: &Option<S<String>>, default: &str) -> String {
    match v {
        Some(n) if !is_dns_subdomain(n.get_ref()) => {
            cx.at(
                n.span(),
                format!("nad_name {:?} is not a valid object name", n.get_ref()),
            );
            String::new()
        }
        Some(n) => n.get_ref().clone(),
        None => default.into(),
    }
}

pub(super) fn check_attach(
    cx: &mut Diagnostics,
    v: &Option<S<String>>,
    table: &str,
    shared_name: &str,
) -> Attach {
    match v {
        None => Attach::Shared,
        Some(a) if a.get_ref() == shared_name => Attach::Shared,
        Some(a) if a.get_ref() == "sriov" => Attach::Sriov,
        Some(a) => {
            cx.at(
                a.span(),
                format!(
                    "[{table}].attach {:?} must be \"{shared_name}\" or \"sriov\"",
                    a.get_ref()
                ),
            );
            Attach::Shared
        }
    }
}
